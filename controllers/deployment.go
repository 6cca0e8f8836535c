package controllers

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/resources"
)

func (r *WebhookEndpointReconciler) resourceOptions(st *state) resources.Options {
	return resources.Options{
		Image:      r.Options.ReceiverImage,
		Rendered:   st.rendered,
		ConfigHash: st.configHash,
	}
}

// reconcileServiceAccount gives the pods an identity without an API token. It comes
// before the migration Job, whose pod runs under it.
func (r *WebhookEndpointReconciler) reconcileServiceAccount(ctx context.Context, st *state) error {
	_, err := r.apply(ctx, st.ep, resources.EndpointReceivers(st.ep, r.resourceOptions(st)).ServiceAccount())
	return err
}

// reconcileDeployment applies the receiver Deployment and reads its availability; a
// pooled endpoint has none (reconcilePooled).
func (r *WebhookEndpointReconciler) reconcileDeployment(ctx context.Context, st *state) error {
	ep := st.ep
	if ep.Spec.Receiver.PoolRef != nil {
		return r.reconcilePooled(ctx, st)
	}
	desired := resources.Deployment(ep, r.resourceOptions(st))

	current := &appsv1.Deployment{}
	err := r.Get(ctx, client.ObjectKeyFromObject(desired), current)
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("get Deployment %s: %w", desired.Name, err)
	}
	existed := err == nil
	live, err := r.apply(ctx, ep, desired)
	if err != nil {
		return err
	}
	if existed {
		r.rolloutEvent(st, current, desired)
	}
	applied := &appsv1.Deployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(live.Object, applied); err != nil {
		return fmt.Errorf("read applied Deployment %s: %w", desired.Name, err)
	}
	r.receiverAvailability(ctx, st, applied)
	return nil
}

// rolloutEvent says why the pods roll: a Secret value changed under the same config
// (rotation), or the config itself changed.
func (r *WebhookEndpointReconciler) rolloutEvent(st *state, current, desired *appsv1.Deployment) {
	oldHash := current.Spec.Template.Annotations[resources.AnnotationConfigHash]
	newHash := desired.Spec.Template.Annotations[resources.AnnotationConfigHash]
	if oldHash == "" || oldHash == newHash {
		return
	}
	if envValue(current, config.EnvEndpoint) == envValue(desired, config.EnvEndpoint) {
		r.event(st.ep, corev1.EventTypeNormal, EventSecretRotated, "Rollout",
			"a referenced Secret value changed; rolling the receiver pods")
		return
	}
	r.event(st.ep, corev1.EventTypeNormal, EventConfigChanged, "Rollout",
		"the endpoint configuration changed; rolling the receiver pods")
}

func envValue(d *appsv1.Deployment, name string) string {
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == name {
				return e.Value
			}
		}
	}
	return ""
}

// unavailableRecheck is how often an endpoint whose receiver replicas are unavailable
// is reconciled again, to read its pods' state.
const unavailableRecheck = 10 * time.Second

// receiverAvailability sets ReceiverAvailable from the Deployment's status: the current
// template is rolled out to every replica and the Deployment reports Available. When
// replicas are unavailable, the pods say why (receiverPodsCause).
func (r *WebhookEndpointReconciler) receiverAvailability(ctx context.Context, st *state, d *appsv1.Deployment) {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	available := false
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue {
			available = true
		}
	}
	s := d.Status
	switch {
	case want == 0 && st.allSecretsExpired():
		// The operator scaled it to zero, not spec.receiver.replicas: say why.
		st.setCondition(v1alpha1.ConditionReceiverAvailable, metav1.ConditionFalse, ReasonAllExpired,
			fmt.Sprintf("Deployment %s is scaled to zero because every spec.signingSecrets entry has passed its "+
				"expiresAt: no receiver runs and providers' webhooks are not answered; add a current secret", d.Name))
	case want == 0:
		// Nothing receives: providers' deliveries fail until replicas are raised, so the
		// endpoint is not Ready, whatever "0 of 0 available" would suggest.
		st.setCondition(v1alpha1.ConditionReceiverAvailable, metav1.ConditionFalse, ReasonScaledToZero,
			fmt.Sprintf("Deployment %s is scaled to zero (spec.receiver.replicas: 0): no receiver runs and "+
				"providers' webhooks are not answered; set replicas to 1 or more", d.Name))
	case s.ObservedGeneration < d.Generation || s.UpdatedReplicas < want:
		st.setCondition(v1alpha1.ConditionReceiverAvailable, metav1.ConditionFalse, ReasonRollingOut,
			fmt.Sprintf("Deployment %s is rolling out: %d of %d replicas updated", d.Name, s.UpdatedReplicas, want))
	case !available || s.AvailableReplicas < want:
		// The operator watches no Pods, and a crash loop changes nothing the Deployment
		// reports: look at the pods again soon, so their cause shows within seconds.
		st.requeue(st.now.Add(unavailableRecheck))
		reason, msg := ReasonUnavailable, fmt.Sprintf("Deployment %s has %d of %d replicas available", d.Name, s.AvailableReplicas, want)
		if podReason, cause := r.receiverPodsCause(ctx, d); podReason != "" {
			reason, msg = podReason, msg+": "+cause
		} else {
			msg += "; check the receiver pods' readiness (/readyz needs the database)"
		}
		st.setCondition(v1alpha1.ConditionReceiverAvailable, metav1.ConditionFalse, reason, msg)
	default:
		if st.transitioned(v1alpha1.ConditionReceiverAvailable, metav1.ConditionTrue, ReasonAvailable) {
			r.event(st.ep, corev1.EventTypeNormal, EventReceiverAvailable, "Rollout",
				"receiver Deployment %s has %d available replica(s)", d.Name, s.AvailableReplicas)
		}
		st.setCondition(v1alpha1.ConditionReceiverAvailable, metav1.ConditionTrue, ReasonAvailable,
			fmt.Sprintf("%d of %d replicas available and up to date", s.AvailableReplicas, want))
	}
}

// reconcileService applies the receiver Service (a pool's serves a pooled endpoint).
func (r *WebhookEndpointReconciler) reconcileService(ctx context.Context, st *state) error {
	if st.ep.Spec.Receiver.PoolRef != nil {
		return nil
	}
	_, err := r.apply(ctx, st.ep, resources.EndpointReceivers(st.ep, r.resourceOptions(st)).Service())
	if err == nil {
		st.url = resources.InClusterURL(st.ep)
	}
	return err
}

// reconcilePDB keeps a PodDisruptionBudget only while there is more than one replica,
// and a HorizontalPodAutoscaler only with spec.receiver.autoscaling.
func (r *WebhookEndpointReconciler) reconcilePDB(ctx context.Context, st *state) error {
	if st.ep.Spec.Receiver.PoolRef != nil {
		return nil
	}
	rec := resources.EndpointReceivers(st.ep, r.resourceOptions(st))
	pdb := rec.PodDisruptionBudget()
	var err error
	if rec.WantsPDB() {
		_, err = r.apply(ctx, st.ep, pdb)
	} else {
		err = r.deleteOwned(ctx, st.ep, &policyv1.PodDisruptionBudget{ObjectMeta: pdb.ObjectMeta})
	}
	if err != nil {
		return err
	}
	if hpa := rec.HorizontalPodAutoscaler(); hpa != nil {
		_, err = r.apply(ctx, st.ep, hpa)
		return err
	}
	return r.deleteOwned(ctx, st.ep, &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: rec.Name, Namespace: rec.Namespace}})
}
