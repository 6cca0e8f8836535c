package resources

import (
	"maps"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
)

// MigrationHash identifies what a migration Job migrates: the schema, the image and the
// database (reference and URL value), keyed like ConfigHash so the annotation is no
// digest of the URL. A Job with another hash is stale and runs again.
func MigrationHash(key []byte, ep *v1alpha1.WebhookEndpoint, opts Options, databaseURL []byte) string {
	h := newKeyedHash(key)
	for _, part := range [][]byte{
		[]byte(ep.Spec.Database.Schema), []byte(image(ep.Spec.Receiver.Image, opts)),
		[]byte(ep.Spec.Database.URLSecretRef.Name), []byte(ep.Spec.Database.URLSecretRef.Key),
		databaseURL,
	} {
		h.write(part)
	}
	return h.sum()
}

// MigrationTarget identifies the schema a migration Job migrates, whichever endpoint
// owns it: the database URL, the schema and the image, keyed like MigrationHash and cut
// to fit a label value. Endpoints sharing a schema (a pool's members) share it.
func MigrationTarget(key []byte, ep *v1alpha1.WebhookEndpoint, opts Options, databaseURL []byte) string {
	h := newKeyedHash(key)
	for _, part := range [][]byte{[]byte(ep.Spec.Database.Schema), []byte(image(ep.Spec.Receiver.Image, opts)), databaseURL} {
		h.write(part)
	}
	return h.sum()[:40]
}

// MigrationJob runs `hookkeeper-receiver migrate` once for the schema version of this binary.
// It has no TTL: the operator must see it complete before the Deployment is created.
func MigrationJob(ep *v1alpha1.WebhookEndpoint, opts Options, migrationHash, target string) *batchv1.Job {
	labels := Labels(ep, ComponentMigration)
	jobLabels := maps.Clone(labels)
	jobLabels[LabelMigrationTarget] = target
	vols, mounts := tmpVolumes()
	return &batchv1.Job{
		TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{
			Name: MigrationJobName(ep), Namespace: ep.Namespace, Labels: jobLabels,
			Annotations: map[string]string{AnnotationMigrationHash: migrationHash},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptr.To[int32](4),
			ActiveDeadlineSeconds: ptr.To[int64](900),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					ServiceAccountName:           ReceiverName(ep),
					AutomountServiceAccountToken: ptr.To(false),
					EnableServiceLinks:           ptr.To(false),
					SecurityContext:              podSecurityContext(),
					Volumes:                      vols,
					Containers: []corev1.Container{{
						Name:    ContainerMigrate,
						Image:   image(ep.Spec.Receiver.Image, opts),
						Command: ReceiverCommand,
						Args:    []string{"migrate"},
						Env: []corev1.EnvVar{
							{Name: config.EnvEndpoint, Value: string(opts.Rendered.JSON)},
							secretEnv(databaseRef(ep)),
						},
						Resources:       defaultResources(),
						SecurityContext: containerSecurityContext(),
						VolumeMounts:    mounts,
						ImagePullPolicy: corev1.PullIfNotPresent,
						// The operator copies the termination message into the
						// DatabaseMigrated condition when the Job fails.
						TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
					}},
				},
			},
		},
	}
}
