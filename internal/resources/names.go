package resources

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/store"
)

// Label keys and values shared by every owned object.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelComponent = "app.kubernetes.io/component"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelPartOf    = "app.kubernetes.io/part-of"

	AppName            = "hookkeeper"
	ManagedBy          = "hookkeeper-operator"
	ComponentReceiver  = "receiver"
	ComponentMigration = "migration"

	// AnnotationConfigHash on the pod template carries the keyed hash (ConfigHash) of
	// the rendered config and of the referenced Secrets' values, so a rotation rolls the
	// pods.
	AnnotationConfigHash = "hookkeeper.dev/config-hash"
	// AnnotationMigrationHash on the migration Job records what it migrated (schema,
	// image, database reference and URL, keyed: MigrationHash); a mismatch means the
	// Job must run again.
	AnnotationMigrationHash = "hookkeeper.dev/migration-hash"
	// LabelMigrationTarget marks a migration Job with what it migrates whoever owns it:
	// the database, schema and image (MigrationTarget, keyed). An endpoint finding an
	// active Job with its target waits for it instead of running its own.
	LabelMigrationTarget = "hookkeeper.dev/migration-target"
)

// maxNameLength keeps generated names valid as DNS-1035 labels: Service names and the
// job-name label value a Job puts on its pods are limited to 63 characters.
const maxNameLength = 63

// boundedName joins base and suffix; when that is too long it shortens base and adds a
// hash of the full name, so distinct endpoints keep distinct names.
func boundedName(base, suffix string) string {
	full := base + suffix
	if len(full) <= maxNameLength {
		return full
	}
	sum := sha256.Sum256([]byte(full))
	tag := hex.EncodeToString(sum[:])[:8]
	keep := maxNameLength - len(suffix) - len(tag) - 1
	return fmt.Sprintf("%s-%s%s", base[:keep], tag, suffix)
}

// ReceiverName names the receiver's Deployment, Service, ServiceAccount, PDB and
// NetworkPolicy.
func ReceiverName(ep *v1alpha1.WebhookEndpoint) string {
	return boundedName(ep.Name, "-receiver")
}

// MigrationJobName carries the schema version, so a binary with new migrations runs a
// new Job.
func MigrationJobName(ep *v1alpha1.WebhookEndpoint) string {
	return boundedName(ep.Name, fmt.Sprintf("-migrate-v%d", store.SchemaVersion))
}

// ExposureName names the HTTPRoute or Ingress.
func ExposureName(ep *v1alpha1.WebhookEndpoint) string {
	return boundedName(ep.Name, "")
}

// MonitoringName names the ServiceMonitor and PrometheusRule.
func MonitoringName(ep *v1alpha1.WebhookEndpoint) string {
	return boundedName(ep.Name, "-receiver")
}

// Labels are the labels of every object owned by ep for component.
func Labels(ep *v1alpha1.WebhookEndpoint, component string) map[string]string {
	return map[string]string{
		LabelName:      AppName,
		LabelInstance:  boundedName(ep.Name, ""),
		LabelComponent: component,
		LabelManagedBy: ManagedBy,
		LabelPartOf:    AppName,
	}
}

// SelectorLabels select the receiver pods of ep; they never change, since a
// Deployment's selector is immutable.
func SelectorLabels(ep *v1alpha1.WebhookEndpoint) map[string]string {
	return map[string]string{
		LabelName:      AppName,
		LabelInstance:  boundedName(ep.Name, ""),
		LabelComponent: ComponentReceiver,
	}
}
