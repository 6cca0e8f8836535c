package resources

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
)

// SecretRef is one Secret key the receiver pods read, with the env var that carries it
// and the spec field that asked for it (for messages a person can act on).
type SecretRef struct {
	// Field is the spec path of the reference, e.g. spec.signingSecrets[1].secretKeyRef.
	Field string
	// Name and Key select the Secret key in the endpoint's namespace.
	Name string
	Key  string
	// EnvVar receives the value in the receiver pods.
	EnvVar string
}

// Rendered is the endpoint as the receiver pods see it: the spec with expired signing
// secrets dropped, so the indexes of HOOKKEEPER_SIGNING_SECRET_<i> and of
// spec.signingSecrets in the rendered JSON agree.
type Rendered struct {
	// JSON is the value of config.EnvEndpoint.
	JSON []byte
	// ActiveSecrets are the signing secrets still verifying at render time, in spec order.
	ActiveSecrets []v1alpha1.SigningSecret
	// Refs are every Secret key the pods read, in a stable order.
	Refs []SecretRef
}

// renderedEndpoint is the document in config.EnvEndpoint: only what the receiver needs,
// never status or server-managed metadata, so it changes only when the config does.
type renderedEndpoint struct {
	APIVersion string                       `json:"apiVersion"`
	Kind       string                       `json:"kind"`
	Metadata   renderedMeta                 `json:"metadata"`
	Spec       v1alpha1.WebhookEndpointSpec `json:"spec"`
}

type renderedMeta struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

// Active reports whether s still verifies at now. A secret stops at expiresAt exactly.
func Active(s v1alpha1.SigningSecret, now time.Time) bool {
	return s.ExpiresAt == nil || now.Before(s.ExpiresAt.Time)
}

// NextExpiry is the earliest expiresAt after now, when a signing secret must be dropped.
func NextExpiry(ep *v1alpha1.WebhookEndpoint, now time.Time) (time.Time, bool) {
	var next time.Time
	for _, s := range ep.Spec.SigningSecrets {
		if s.ExpiresAt == nil || !now.Before(s.ExpiresAt.Time) {
			continue
		}
		if next.IsZero() || s.ExpiresAt.Time.Before(next) {
			next = s.ExpiresAt.Time
		}
	}
	return next, !next.IsZero()
}

// Render builds the receiver's view of ep at now.
func Render(ep *v1alpha1.WebhookEndpoint, now time.Time) (Rendered, error) {
	spec := *ep.Spec.DeepCopy()
	active := make([]v1alpha1.SigningSecret, 0, len(spec.SigningSecrets))
	var refs []SecretRef
	for i, s := range spec.SigningSecrets {
		if !Active(s, now) {
			continue
		}
		refs = append(refs, SecretRef{
			Field:  fmt.Sprintf("spec.signingSecrets[%d].secretKeyRef", i),
			Name:   s.SecretKeyRef.Name,
			Key:    s.SecretKeyRef.Key,
			EnvVar: config.EnvSigningSecretPrefix + strconv.Itoa(len(active)),
		})
		active = append(active, s)
	}
	spec.SigningSecrets = active
	// What only the operator acts on stays out of the pods' config, so scaling, exposing
	// or fencing the receiver does not roll its pods.
	spec.Exposure = nil
	spec.NetworkPolicy = v1alpha1.NetworkPolicySpec{}
	spec.Monitoring = v1alpha1.MonitoringSpec{}
	spec.Receiver.Replicas = nil
	spec.Receiver.Resources = corev1.ResourceRequirements{}
	spec.Receiver.Image = ""
	refs = append(refs, SecretRef{
		Field:  "spec.database.urlSecretRef",
		Name:   spec.Database.URLSecretRef.Name,
		Key:    spec.Database.URLSecretRef.Key,
		EnvVar: config.EnvDatabaseURL,
	})
	if ref := spec.Delivery.SigningSecretRef; ref != nil {
		refs = append(refs, SecretRef{
			Field: "spec.delivery.signingSecretRef", Name: ref.Name, Key: ref.Key,
			EnvVar: config.EnvDeliverySecret,
		})
	}
	if rf := spec.Provider.Refetch; rf != nil {
		refs = append(refs, SecretRef{
			Field: "spec.provider.refetch.apiKeySecretRef", Name: rf.APIKeySecretRef.Name,
			Key: rf.APIKeySecretRef.Key, EnvVar: config.EnvRefetchAPIKey,
		})
	}
	doc := renderedEndpoint{
		APIVersion: v1alpha1.GroupVersion.String(),
		Kind:       "WebhookEndpoint",
		Metadata:   renderedMeta{Name: ep.Name, Namespace: ep.Namespace},
		Spec:       spec,
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		return Rendered{}, fmt.Errorf("render endpoint %s/%s: %w", ep.Namespace, ep.Name, err)
	}
	return Rendered{JSON: raw, ActiveSecrets: active, Refs: refs}, nil
}

// SecretNames are the names of every Secret ep references, expired or not: the keys of
// the field index that maps Secret events to endpoints.
func SecretNames(ep *v1alpha1.WebhookEndpoint) []string {
	seen := map[string]bool{}
	add := func(sel *corev1.SecretKeySelector) {
		if sel != nil && sel.Name != "" {
			seen[sel.Name] = true
		}
	}
	for i := range ep.Spec.SigningSecrets {
		add(&ep.Spec.SigningSecrets[i].SecretKeyRef)
	}
	add(&ep.Spec.Database.URLSecretRef)
	add(ep.Spec.Delivery.SigningSecretRef)
	if ep.Spec.Provider.Refetch != nil {
		add(&ep.Spec.Provider.Refetch.APIKeySecretRef)
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ConfigHash is the HMAC-SHA256, under the per-install key, of the rendered config and
// of the values of the referenced Secret keys (only those keys: an unrelated key in the
// same Secret changes nothing). values maps "name/key" to the value. It changes when
// the config or a referenced value does, and without key it says nothing about the
// values (see keyedHash).
func ConfigHash(key []byte, r Rendered, values map[string][]byte) string {
	h := newKeyedHash(key)
	h.write(r.JSON)
	for _, ref := range r.Refs {
		id := ref.Name + "/" + ref.Key
		h.write([]byte(ref.EnvVar))
		h.write([]byte(id))
		h.write(values[id])
	}
	return h.sum()
}
