package controllers

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/resources"
)

// poolRoutePoll is how often the operator looks again at a pool's HTTPRoute that no
// Gateway has accepted yet (the pool controller does not watch HTTPRoutes: the Gateway
// API may not be installed).
const poolRoutePoll = 10 * time.Second

// reconcileExposure publishes the pool's Service through an HTTPRoute or an Ingress
// (the same builders as an endpoint's own receivers), removes whichever is not wanted,
// and reports Exposed and status.publicURL, which its members' status.url follows. It
// returns when to look again (zero: when something changes).
func (r *WebhookReceiverPoolReconciler) reconcileExposure(ctx context.Context, pool *v1alpha1.WebhookReceiverPool) (time.Duration, error) {
	var wantRoute, wantIngress bool
	if ex := pool.Spec.Exposure; ex != nil {
		wantRoute, wantIngress = ex.HTTPRoute != nil, ex.Ingress != nil
	}
	gatewayInstalled, err := kindInstalled(r.RESTMapper(), httpRouteGVK)
	if err != nil {
		return 0, err
	}
	name := resources.PoolName(pool.Name)
	if !wantRoute && gatewayInstalled {
		route := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: pool.Namespace}}
		if err := deleteIfOwned(ctx, r.Client, r.reader(), pool, route); err != nil {
			return 0, err
		}
	}
	if !wantIngress {
		ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: pool.Namespace}}
		if err := deleteIfOwned(ctx, r.Client, r.reader(), pool, ing); err != nil {
			return 0, err
		}
	}
	st := &pool.Status
	st.PublicURL = ""
	notExposed := func(reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionExposed, Status: metav1.ConditionFalse,
			Reason: reason, Message: oneLine(msg), ObservedGeneration: pool.Generation})
	}
	switch {
	case wantRoute && !gatewayInstalled:
		notExposed(ReasonGatewayMissing, gatewayMissing)
		return poolRoutePoll, nil
	case wantRoute:
		live, err := applyOwned(ctx, r.Client, r.Scheme, pool, resources.PoolHTTPRoute(pool))
		if err != nil {
			return 0, err
		}
		route, err := readRoute(live)
		if err != nil {
			return 0, err
		}
		if route.accepted() {
			st.PublicURL = resources.PoolPublicURL(pool)
			r.exposed(pool, ReasonAccepted, route.acceptedMessage("public base URL", st.PublicURL))
			return 0, nil
		}
		notExposed(route.notAccepted())
		return poolRoutePoll, nil
	case wantIngress:
		live, err := applyOwned(ctx, r.Client, r.Scheme, pool, resources.PoolIngress(pool))
		if err != nil {
			return 0, err
		}
		addrs := ingressAddresses(live)
		if len(addrs) == 0 {
			notExposed(ReasonIngressPending, fmt.Sprintf(
				"waiting for the Ingress controller to give Ingress %s an address; check spec.exposure.ingress.className", live.GetName()))
			return 0, nil // the Ingress watch brings the address
		}
		st.PublicURL = resources.PoolPublicURL(pool)
		r.exposed(pool, ReasonLoadBalanced, fmt.Sprintf("Ingress %s has address %s; public base URL %s",
			live.GetName(), strings.Join(addrs, ", "), st.PublicURL))
		return 0, nil
	}
	if meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionExposed) != nil {
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionExposed)
		r.event(pool, corev1.EventTypeNormal, EventExposureRemoved, "Expose",
			"exposure removed; the pool's endpoints are reachable in the cluster only")
	}
	return 0, nil
}

// exposed sets Exposed True, with an event when it was not.
func (r *WebhookReceiverPoolReconciler) exposed(pool *v1alpha1.WebhookReceiverPool, reason, msg string) {
	prev := meta.FindStatusCondition(pool.Status.Conditions, v1alpha1.ConditionExposed)
	if prev == nil || prev.Status != metav1.ConditionTrue || prev.Reason != reason {
		r.event(pool, corev1.EventTypeNormal, EventExposed, "Expose", "%s", msg)
	}
	meta.SetStatusCondition(&pool.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionExposed,
		Status: metav1.ConditionTrue, Reason: reason, Message: oneLine(msg), ObservedGeneration: pool.Generation})
}

// event records an event on the pool.
func (r *WebhookReceiverPoolReconciler) event(pool *v1alpha1.WebhookReceiverPool, eventType, reason, action, note string, args ...any) {
	recordEvent(r.Recorder, pool, eventType, reason, action, note, args...)
}
