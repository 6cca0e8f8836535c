package controllers

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// Condition reasons. Each False reason says what a person can do about it in the message.
const (
	ReasonValid           = "Valid"
	ReasonInvalidConfig   = "InvalidConfig"
	ReasonResolved        = "Resolved"
	ReasonSecretNotFound  = "SecretNotFound"
	ReasonKeyNotFound     = "KeyNotFound"
	ReasonSecretEmpty     = "SecretEmpty"
	ReasonAllExpired      = "AllSecretsExpired"
	ReasonMigrated        = "Migrated"
	ReasonMigrating       = "Migrating"
	ReasonMigrationFailed = "MigrationFailed"
	// ReasonMigrationFailing: the migration Job's attempts fail and it is retrying.
	ReasonMigrationFailing = "MigrationFailing"
	ReasonAvailable        = "Available"
	ReasonRollingOut       = "RollingOut"
	ReasonUnavailable      = "Unavailable"
	ReasonWaiting          = "WaitingForMigration"
	ReasonAccepted         = "Accepted"
	ReasonLoadBalanced     = "LoadBalancerReady"
	ReasonRoutePending     = "RoutePending"
	ReasonRouteRejected    = "RouteNotAccepted"
	ReasonIngressPending   = "IngressPending"
	ReasonGatewayMissing   = "GatewayAPINotInstalled"
	ReasonReady            = "Ready"
	ReasonProgressing      = "Progressing"
	// ReasonSinkAnswering, ReasonSinkDown and ReasonSinkStateUnknown are SinkHealthy's.
	ReasonSinkAnswering    = "SinkAnswering"
	ReasonSinkDown         = "SinkDown"
	ReasonSinkStateUnknown = "SinkStateUnknown"
	// ReasonScaledToZero: spec.receiver.replicas is 0, so nothing receives webhooks.
	ReasonScaledToZero = "ScaledToZero"
	// ReasonNotOwned: an object the operator would create exists and is someone else's.
	ReasonNotOwned = "NotOwned"
	// ReasonStepFailed: a reconcile step failed (a write or read the API server did not
	// complete); it is retried with backoff.
	ReasonStepFailed = "ReconcileStepFailed"
	// ReasonWriteRejected: the API server rejected one of the operator's writes as
	// invalid or forbidden (a value the object's own validation refuses, an immutable
	// field someone changed, an admission policy, RBAC). Retrying the same write cannot
	// succeed until a person changes the spec, the object or the policy.
	ReasonWriteRejected = "WriteRejected"
)

// oneLine folds a message (an error, a pod's termination or scheduling message) onto one
// line and bounds it at maxTerminationMessage, for a condition or an Event.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > maxTerminationMessage {
		s = s[:maxTerminationMessage] + "..."
	}
	return s
}

// maxConditionMessage is below metav1.Condition's 32768-byte limit.
const maxConditionMessage = 32000

// stalledReasons need a person to act; every other False reason converges by itself.
var stalledReasons = map[string]bool{
	ReasonInvalidConfig:   true,
	ReasonSecretNotFound:  true,
	ReasonKeyNotFound:     true,
	ReasonSecretEmpty:     true,
	ReasonAllExpired:      true,
	ReasonMigrationFailed: true,
	ReasonGatewayMissing:  true,
	ReasonRouteRejected:   true,
	ReasonNotOwned:        true,
	ReasonScaledToZero:    true,
	ReasonWriteRejected:   true,
}

// setCondition records a condition for the current generation.
func (st *state) setCondition(condType string, status metav1.ConditionStatus, reason, message string) {
	if len(message) > maxConditionMessage {
		message = message[:maxConditionMessage-3] + "..."
	}
	meta.SetStatusCondition(&st.ep.Status.Conditions, metav1.Condition{
		Type:               condType,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: st.ep.Generation,
	})
}

// previous is the condition as it was before this reconcile, for transition events.
func (st *state) previous(condType string) *metav1.Condition {
	return meta.FindStatusCondition(st.original.Status.Conditions, condType)
}

// transitioned reports whether condType moved to status (or changed reason) in this
// reconcile: events fire on changes, not on every pass.
func (st *state) transitioned(condType string, status metav1.ConditionStatus, reason string) bool {
	prev := st.previous(condType)
	return prev == nil || prev.Status != status || prev.Reason != reason
}

// requiredConditions make up Ready, in skeleton order.
func requiredConditions(ep *v1alpha1.WebhookEndpoint) []string {
	conds := []string{
		v1alpha1.ConditionConfigValid, v1alpha1.ConditionSecretsResolved,
		v1alpha1.ConditionDatabaseMigrated, v1alpha1.ConditionReceiverAvailable,
	}
	if ep.Spec.Exposure != nil && (ep.Spec.Exposure.HTTPRoute != nil || ep.Spec.Exposure.Ingress != nil) {
		conds = append(conds, v1alpha1.ConditionExposed)
	}
	return conds
}

// summarize sets Ready from the required conditions and the kstatus Reconciling and
// Stalled conditions from the first one that is not True.
func (st *state) summarize() {
	ep := st.ep
	if ep.Spec.Exposure == nil || (ep.Spec.Exposure.HTTPRoute == nil && ep.Spec.Exposure.Ingress == nil) {
		meta.RemoveStatusCondition(&ep.Status.Conditions, v1alpha1.ConditionExposed)
	}
	var blocking *metav1.Condition
	for _, t := range requiredConditions(ep) {
		c := meta.FindStatusCondition(ep.Status.Conditions, t)
		// A condition left from an earlier generation does not count: the step that
		// owns it did not get to run for this spec.
		if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != ep.Generation {
			blocking = c
			if c == nil || c.ObservedGeneration != ep.Generation {
				blocking = &metav1.Condition{
					Type: t, Status: metav1.ConditionUnknown, Reason: ReasonProgressing,
					Message: fmt.Sprintf("%s not yet evaluated for generation %d", t, ep.Generation),
				}
			}
			break
		}
	}
	// A step that failed outranks the conditions: those after it were not evaluated.
	if st.failed != nil {
		blocking = st.failedCondition()
	}
	// SinkHealthy holds Ready back only when False for this generation: a sink that is
	// down means effects are not reaching the app, and it converges by itself once the
	// sink answers (Reconciling). Unknown (the operator cannot read the database the
	// dispatchers write) says nothing about the endpoint and does not count.
	if c := meta.FindStatusCondition(ep.Status.Conditions, v1alpha1.ConditionSinkHealthy); blocking == nil && c != nil &&
		c.Status == metav1.ConditionFalse && c.ObservedGeneration == ep.Generation {
		blocking = c
	}
	if blocking == nil {
		st.setCondition(v1alpha1.ConditionReady, metav1.ConditionTrue, ReasonReady,
			fmt.Sprintf("receiving webhooks at %s", st.url))
		meta.RemoveStatusCondition(&ep.Status.Conditions, v1alpha1.ConditionReconciling)
		meta.RemoveStatusCondition(&ep.Status.Conditions, v1alpha1.ConditionStalled)
		return
	}
	msg := fmt.Sprintf("%s: %s", blocking.Type, blocking.Message)
	st.setCondition(v1alpha1.ConditionReady, metav1.ConditionFalse, blocking.Reason, msg)
	if stalledReasons[blocking.Reason] {
		st.setCondition(v1alpha1.ConditionStalled, metav1.ConditionTrue, blocking.Reason, msg)
		meta.RemoveStatusCondition(&ep.Status.Conditions, v1alpha1.ConditionReconciling)
		return
	}
	st.setCondition(v1alpha1.ConditionReconciling, metav1.ConditionTrue, blocking.Reason, msg)
	meta.RemoveStatusCondition(&ep.Status.Conditions, v1alpha1.ConditionStalled)
}

// failedCondition describes st.failed as the condition that holds Ready back.
func (st *state) failedCondition() *metav1.Condition {
	reason := ReasonStepFailed
	switch {
	case isNotOwned(st.failed):
		reason = ReasonNotOwned
	case apierrors.IsInvalid(st.failed) || apierrors.IsForbidden(st.failed):
		reason = ReasonWriteRejected
	}
	return &metav1.Condition{Type: "Reconcile", Status: metav1.ConditionFalse, Reason: reason, Message: oneLine(st.failed.Error())}
}

// failedStepEvent records a Warning Event when a step starts failing, or fails for
// another reason than the last reconcile's.
func (r *WebhookEndpointReconciler) failedStepEvent(st *state) {
	if st.failed == nil {
		return
	}
	c := st.failedCondition()
	if prev := st.previous(v1alpha1.ConditionReady); prev != nil && prev.Status == metav1.ConditionFalse &&
		prev.Reason == c.Reason && prev.Message == c.Type+": "+c.Message {
		return
	}
	r.event(st.ep, corev1.EventTypeWarning, c.Reason, "Reconcile", "%s", c.Message)
}

// patchStatus writes the status once per reconcile, and not at all when nothing changed,
// so a no-op reconcile leaves the endpoint's resourceVersion alone.
func (r *WebhookEndpointReconciler) patchStatus(ctx context.Context, st *state) error {
	st.summarize()
	ep := st.ep
	ep.Status.ObservedGeneration = ep.Generation
	if st.url != "" {
		ep.Status.URL = st.url
	}
	if st.rendered.JSON != nil {
		ep.Status.ActiveSecrets = int32(len(st.rendered.ActiveSecrets))
	}
	if equality.Semantic.DeepEqual(st.original.Status, ep.Status) {
		return nil
	}
	if err := r.Status().Patch(ctx, ep, client.MergeFrom(st.original)); err != nil {
		return fmt.Errorf("patch status of %s/%s: %w", ep.Namespace, ep.Name, err)
	}
	return nil
}
