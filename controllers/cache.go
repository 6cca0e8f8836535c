package controllers

import (
	"context"
	"crypto/rand"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hookkeeper/hookkeeper/internal/resources"
)

// The manager never holds Secret values in memory beyond one reconcile. It watches
// Secrets as metadata only (names and resourceVersions: enough to know that a referenced
// Secret changed) and reads the referenced ones directly from the API server when it
// reconciles. CacheOptions and ClientOptions are the manager's settings that make it
// so; every manager that runs the reconciler (the manager command, `hookkeeper dev`,
// the tests) uses them.

// CacheOptions strip what could carry a Secret's value from the Secret metadata the
// manager caches: annotations (kubectl's last-applied-configuration holds the whole
// Secret, data included) and managed fields. Should a full Secret ever reach the cache,
// its data is dropped as well.
func CacheOptions() cache.Options {
	return cache.Options{
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Transform: stripSecret},
		},
	}
}

// ClientOptions make the manager's client read Secrets from the API server, never from
// the cache (a cached read would start a cluster-wide informer of full Secrets).
func ClientOptions() client.Options {
	return client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}}
}

var _ toolscache.TransformFunc = stripSecret

func stripSecret(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetAnnotations(nil)
		m.SetManagedFields(nil)
	}
	if s, ok := obj.(*corev1.Secret); ok {
		s.Data, s.StringData = nil, nil
	}
	return obj, nil
}

// HashKeySecretName is the Secret, in Options.KeyNamespace, that holds the per-install
// key of the rollout hashes (the config hash on the receiver pod template and the
// migration hash on the Job). The operator creates it with a random key on first use.
// Deleting it makes the next operator process create a new key, which rolls every
// receiver and re-runs every migration Job once.
const HashKeySecretName = "hookkeeper-hash-key"

// hashKeyField is the data key of HashKeySecretName.
const hashKeyField = "key"

// DefaultKeyNamespace holds HashKeySecretName when Options.KeyNamespace is empty.
const DefaultKeyNamespace = "default"

func (r *WebhookEndpointReconciler) keyNamespace() string {
	if r.Options.KeyNamespace != "" {
		return r.Options.KeyNamespace
	}
	return DefaultKeyNamespace
}

// hashKey returns the per-install hash key, creating its Secret on first use. The key is
// read once per process: it changes only when someone deletes the Secret.
func (r *WebhookEndpointReconciler) hashKey(ctx context.Context) ([]byte, error) {
	r.keyMu.Lock()
	defer r.keyMu.Unlock()
	if r.key != nil {
		return r.key, nil
	}
	ref := client.ObjectKey{Namespace: r.keyNamespace(), Name: HashKeySecretName}
	secret := &corev1.Secret{}
	err := r.reader().Get(ctx, ref, secret)
	if apierrors.IsNotFound(err) {
		key := make([]byte, resources.HashKeyBytes)
		_, _ = rand.Read(key) // crypto/rand.Read never fails (Go 1.24+)
		secret = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name: ref.Name, Namespace: ref.Namespace,
				Labels: map[string]string{
					resources.LabelName: resources.AppName, resources.LabelManagedBy: resources.ManagedBy,
					resources.LabelPartOf: resources.AppName,
				},
				Annotations: map[string]string{
					"hookkeeper.dev/purpose": "key of the rollout hashes on receiver pod templates and migration Jobs; deleting it rolls every receiver once",
				},
			},
			Type:      corev1.SecretTypeOpaque,
			Immutable: ptr.To(true),
			Data:      map[string][]byte{hashKeyField: key},
		}
		err = r.Create(ctx, secret)
		if apierrors.IsAlreadyExists(err) {
			// Another replica created it first: use theirs.
			secret = &corev1.Secret{}
			err = r.reader().Get(ctx, ref, secret)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("hash key Secret %s: %w", ref, err)
	}
	key := secret.Data[hashKeyField]
	if len(key) < resources.HashKeyBytes {
		return nil, fmt.Errorf("hash key Secret %s: key %q holds %d bytes, want at least %d; delete the Secret and the operator creates a new one (every receiver rolls once)",
			ref, hashKeyField, len(key), resources.HashKeyBytes)
	}
	r.key = key
	return key, nil
}
