package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/resources"
)

// referenceIndexField indexes WebhookEndpoints by the names of the Secrets they reference,
// so a Secret event reaches exactly the endpoints that read it.
const referenceIndexField = ".spec.referencedSecretNames"

func indexSecretNames(obj client.Object) []string {
	ep, ok := obj.(*v1alpha1.WebhookEndpoint)
	if !ok {
		return nil
	}
	return resources.SecretNames(ep)
}

// endpointsForSecret maps a Secret to the endpoints in its namespace that reference it.
func (r *WebhookEndpointReconciler) endpointsForSecret(ctx context.Context, obj client.Object) []reconcile.Request {
	var list v1alpha1.WebhookEndpointList
	if err := r.List(ctx, &list, client.InNamespace(obj.GetNamespace()),
		client.MatchingFields{referenceIndexField: obj.GetName()}); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, ep := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&ep)})
	}
	return reqs
}

// expiryMargin is how long after an expiresAt the reconcile runs, so the secret is
// certainly expired by then.
const expiryMargin = 50 * time.Millisecond

// reconcileSecrets reads every referenced Secret key that is still in use and hashes the
// values with the rendered config, keyed by the per-install hash key. A missing Secret,
// key or empty value stops the reconcile before any pod could start without it. Messages
// name the referenced key only, never the other keys a Secret holds.
func (r *WebhookEndpointReconciler) reconcileSecrets(ctx context.Context, st *state) error {
	ep := st.ep
	if next, ok := resources.NextExpiry(ep, st.now); ok {
		st.requeue(next.Add(expiryMargin))
	}
	values, problem, err := secretValues(ctx, r.reader(), ep.Namespace, st.rendered.Refs)
	if err != nil {
		return err
	}
	if problem != nil {
		return r.secretsUnresolved(st, problem.reason, problem.message)
	}
	key, err := r.hashKey(ctx)
	if err != nil {
		return err
	}
	st.values = values
	st.hashKey = key
	st.configHash = resources.ConfigHash(key, st.rendered, values)

	expired := len(ep.Spec.SigningSecrets) - len(st.rendered.ActiveSecrets)
	if prev := st.original.Status.ActiveSecrets; prev > 0 && int(prev) > len(st.rendered.ActiveSecrets) &&
		st.original.Status.ObservedGeneration == ep.Generation {
		r.event(ep, corev1.EventTypeNormal, EventSecretExpired, "Rotate",
			"%d signing secret(s) passed expiresAt and no longer verify; the receiver pods roll", expired)
	}
	if len(st.rendered.ActiveSecrets) == 0 {
		// Continue: the Deployment is scaled to zero so no pod verifies with an expired
		// secret; providers retry until a new secret is added.
		msg := "every spec.signingSecrets entry has passed its expiresAt; add a current secret (the receiver is scaled to zero until then)"
		if st.transitioned(v1alpha1.ConditionSecretsResolved, metav1.ConditionFalse, ReasonAllExpired) {
			r.event(ep, corev1.EventTypeWarning, EventSecretExpired, "Resolve", "%s", msg)
		}
		st.setCondition(v1alpha1.ConditionSecretsResolved, metav1.ConditionFalse, ReasonAllExpired, msg)
		return nil
	}
	if st.transitioned(v1alpha1.ConditionSecretsResolved, metav1.ConditionTrue, ReasonResolved) &&
		st.previous(v1alpha1.ConditionSecretsResolved) != nil {
		r.event(ep, corev1.EventTypeNormal, EventSecretsResolved, "Resolve", "every referenced Secret key is present")
	}
	st.setCondition(v1alpha1.ConditionSecretsResolved, metav1.ConditionTrue, ReasonResolved,
		fmt.Sprintf("%d active signing secret(s); every referenced Secret key is present", len(st.rendered.ActiveSecrets)))
	return nil
}

// allSecretsExpired reports whether this reconcile found every signing secret past its
// expiresAt (and so scales the receiver to zero).
func (st *state) allSecretsExpired() bool {
	c := meta.FindStatusCondition(st.ep.Status.Conditions, v1alpha1.ConditionSecretsResolved)
	return c != nil && c.Reason == ReasonAllExpired
}

// secretProblem is a referenced Secret key a person must fix: missing, or empty.
type secretProblem struct{ reason, message string }

// secretValues reads every Secret key refs name, in namespace ns, from the API server
// (the manager caches Secret metadata only), keyed "secret/key". A missing Secret, key
// or empty value is a problem, whose message names the referenced key only, never the
// other keys a Secret holds; err is for failures of the API itself.
func secretValues(ctx context.Context, reader client.Reader, ns string, refs []resources.SecretRef) (map[string][]byte, *secretProblem, error) {
	values := make(map[string][]byte, len(refs))
	secrets := map[string]*corev1.Secret{}
	for _, ref := range refs {
		secret, ok := secrets[ref.Name]
		if !ok {
			secret = &corev1.Secret{}
			err := reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: ref.Name}, secret)
			if apierrors.IsNotFound(err) {
				return nil, &secretProblem{ReasonSecretNotFound, fmt.Sprintf(
					"Secret %s/%s not found (referenced by %s); create it or fix the reference",
					ns, ref.Name, ref.Field)}, nil
			}
			if err != nil {
				return nil, nil, fmt.Errorf("get Secret %s/%s: %w", ns, ref.Name, err)
			}
			secrets[ref.Name] = secret
		}
		value, found := secret.Data[ref.Key]
		if !found {
			return nil, &secretProblem{ReasonKeyNotFound, fmt.Sprintf(
				"Secret %s/%s has no key %q (referenced by %s)", ns, ref.Name, ref.Key, ref.Field)}, nil
		}
		if len(value) == 0 {
			return nil, &secretProblem{ReasonSecretEmpty, fmt.Sprintf(
				"Secret %s/%s key %q is empty (referenced by %s); an empty secret never verifies",
				ns, ref.Name, ref.Key, ref.Field)}, nil
		}
		values[ref.Name+"/"+ref.Key] = value
	}
	return values, nil, nil
}

func (r *WebhookEndpointReconciler) secretsUnresolved(st *state, reason, msg string) error {
	if st.transitioned(v1alpha1.ConditionSecretsResolved, metav1.ConditionFalse, reason) {
		r.event(st.ep, corev1.EventTypeWarning, EventSecretMissing, "Resolve", "%s", msg)
	}
	st.setCondition(v1alpha1.ConditionSecretsResolved, metav1.ConditionFalse, reason, msg)
	return errStop
}
