package config

import (
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// SecretLookup returns the value of key in the Secret called name, in the endpoint's
// namespace. Its errors name the Secret and the key, never a value.
type SecretLookup func(name, key string) (string, error)

// EnvFromSecrets is the environment a receiver pod of we has, built from the cluster
// instead of the process: each variable of env.go that a spec field references
// (EnvDatabaseURL, EnvSigningSecretPrefix+i, EnvDeliverySecret, EnvRefetchAPIKey) is
// read through lookup from the Secret key that field selects. It returns a getenv that
// Compile, and everything else that takes one, read exactly as they read os.Getenv, so
// the file-and-environment path and this one build the same Endpoint.
//
// set holds variables given some other way (a --database-url override): their Secret
// keys are not read. Signing secrets whose expiresAt has passed are not read either
// (Compile skips them, as the operator drops them). A failed lookup is returned with the
// spec field that asked for it; no value ever appears in an error.
func EnvFromSecrets(we *v1alpha1.WebhookEndpoint, lookup SecretLookup, set map[string]string, now time.Time) (func(string) string, error) {
	env := make(map[string]string, len(set)+4)
	for k, v := range set {
		env[k] = v
	}
	read := func(field, envVar string, sel *corev1.SecretKeySelector) error {
		if _, given := env[envVar]; given {
			return nil
		}
		if sel.Name == "" || sel.Key == "" {
			return fmt.Errorf("%s names no Secret key", field)
		}
		v, err := lookup(sel.Name, sel.Key)
		if err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		env[envVar] = v
		return nil
	}
	spec := &we.Spec
	if err := read("spec.database.urlSecretRef", EnvDatabaseURL, &spec.Database.URLSecretRef); err != nil {
		return nil, err
	}
	for i := range spec.SigningSecrets {
		s := &spec.SigningSecrets[i]
		if s.ExpiresAt != nil && !now.Before(s.ExpiresAt.Time) {
			continue
		}
		field := "spec.signingSecrets[" + strconv.Itoa(i) + "].secretKeyRef"
		if err := read(field, EnvSigningSecretPrefix+strconv.Itoa(i), &s.SecretKeyRef); err != nil {
			return nil, err
		}
	}
	if ref := spec.Delivery.SigningSecretRef; ref != nil {
		if err := read("spec.delivery.signingSecretRef", EnvDeliverySecret, ref); err != nil {
			return nil, err
		}
	}
	if rf := spec.Provider.Refetch; rf != nil {
		if err := read("spec.provider.refetch.apiKeySecretRef", EnvRefetchAPIKey, &rf.APIKeySecretRef); err != nil {
			return nil, err
		}
	}
	return func(name string) string { return env[name] }, nil
}
