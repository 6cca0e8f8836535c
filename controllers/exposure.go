package controllers

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/resources"
)

var httpRouteGVK = schema.GroupVersionKind{Group: gatewayv1.GroupName, Version: "v1", Kind: "HTTPRoute"}

// gatewayMissing is the Exposed message of an httpRoute exposure without the Gateway API.
const gatewayMissing = "spec.exposure.httpRoute needs the Gateway API CRDs (gateway.networking.k8s.io/v1 HTTPRoute), which are not installed; install them or use spec.exposure.ingress"

// reconcileExposure publishes the receiver through an HTTPRoute or an Ingress, removes
// whichever is not wanted, and sets status.url to the public https URL once the route
// is accepted (or the Ingress has an address), the in-cluster URL otherwise.
func (r *WebhookEndpointReconciler) reconcileExposure(ctx context.Context, st *state) error {
	ep := st.ep
	if ep.Spec.Receiver.PoolRef == nil {
		st.url = resources.InClusterURL(ep)
	} // else the pool's URL, set by reconcilePooled (a pooled endpoint is exposed by its pool's spec.exposure)
	var wantRoute, wantIngress bool
	if ex := ep.Spec.Exposure; ex != nil {
		wantRoute, wantIngress = ex.HTTPRoute != nil, ex.Ingress != nil
	}
	gatewayInstalled, err := r.installed(httpRouteGVK)
	if err != nil {
		return err
	}
	if !wantRoute && gatewayInstalled {
		route := &gatewayv1.HTTPRoute{}
		route.Name, route.Namespace = resources.ExposureName(ep), ep.Namespace
		if err := r.deleteOwned(ctx, ep, route); err != nil {
			return err
		}
	}
	if !wantIngress {
		ing := &networkingv1.Ingress{}
		ing.Name, ing.Namespace = resources.ExposureName(ep), ep.Namespace
		if err := r.deleteOwned(ctx, ep, ing); err != nil {
			return err
		}
	}
	prev := st.previous(v1alpha1.ConditionExposed)
	switch {
	case wantRoute:
		return r.exposeHTTPRoute(ctx, st, gatewayInstalled)
	case wantIngress:
		return r.exposeIngress(ctx, st)
	case prev != nil:
		r.event(ep, corev1.EventTypeNormal, EventExposureRemoved, "Expose",
			"exposure removed; the receiver is reachable in the cluster only")
	}
	return nil
}

func (r *WebhookEndpointReconciler) exposeHTTPRoute(ctx context.Context, st *state, installed bool) error {
	ep := st.ep
	if !installed {
		st.setCondition(v1alpha1.ConditionExposed, metav1.ConditionFalse, ReasonGatewayMissing, gatewayMissing)
		return nil
	}
	if err := r.ensureWatch(ctx, &gatewayv1.HTTPRoute{}); err != nil {
		return err
	}
	live, err := r.apply(ctx, ep, resources.HTTPRoute(ep))
	if err != nil {
		return err
	}
	route, err := readRoute(live)
	if err != nil {
		return err
	}
	if !route.accepted() {
		reason, msg := route.notAccepted()
		st.setCondition(v1alpha1.ConditionExposed, metav1.ConditionFalse, reason, msg)
		return nil
	}
	st.url = resources.PublicURL(ep)
	r.exposed(st, ReasonAccepted, route.acceptedMessage("public URL", st.url))
	return nil
}

// appliedRoute is an applied HTTPRoute's name and which Gateways accepted or rejected
// its current generation.
type appliedRoute struct {
	name              string
	parents, rejected []string
}

// readRoute reads what the API server answered to an HTTPRoute's apply.
func readRoute(live *unstructured.Unstructured) (appliedRoute, error) {
	route := &gatewayv1.HTTPRoute{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(live.Object, route); err != nil {
		return appliedRoute{}, fmt.Errorf("read applied HTTPRoute %s: %w", live.GetName(), err)
	}
	accepted, rejected := routeAcceptance(route)
	return appliedRoute{name: route.Name, parents: accepted, rejected: rejected}, nil
}

func (a appliedRoute) accepted() bool { return len(a.parents) > 0 }

// acceptedMessage is the Exposed message of an accepted route; what names the URL.
func (a appliedRoute) acceptedMessage(what, url string) string {
	return fmt.Sprintf("HTTPRoute %s accepted by %s; %s %s", a.name, strings.Join(a.parents, ", "), what, url)
}

// notAccepted is the Exposed reason and message of a route no Gateway accepted yet.
func (a appliedRoute) notAccepted() (reason, msg string) {
	if len(a.rejected) > 0 {
		return ReasonRouteRejected, fmt.Sprintf(
			"HTTPRoute %s not accepted: %s; check spec.exposure.httpRoute.parentRefs and the Gateway's allowedRoutes",
			a.name, strings.Join(a.rejected, "; "))
	}
	return ReasonRoutePending, fmt.Sprintf("waiting for a Gateway to accept HTTPRoute %s", a.name)
}

// routeAcceptance lists the parents that accepted the current generation of the route,
// and why others rejected it.
func routeAcceptance(route *gatewayv1.HTTPRoute) (accepted, rejected []string) {
	for _, p := range route.Status.Parents {
		name := string(p.ParentRef.Name)
		if p.ParentRef.Namespace != nil {
			name = string(*p.ParentRef.Namespace) + "/" + name
		}
		for _, c := range p.Conditions {
			if c.Type != string(gatewayv1.RouteConditionAccepted) {
				continue
			}
			if c.ObservedGeneration != 0 && c.ObservedGeneration < route.Generation {
				continue
			}
			if c.Status == metav1.ConditionTrue {
				accepted = append(accepted, "Gateway "+name)
			} else {
				rejected = append(rejected, fmt.Sprintf("Gateway %s: %s: %s", name, c.Reason, c.Message))
			}
		}
	}
	return accepted, rejected
}

func (r *WebhookEndpointReconciler) exposeIngress(ctx context.Context, st *state) error {
	ep := st.ep
	live, err := r.apply(ctx, ep, resources.Ingress(ep))
	if err != nil {
		return err
	}
	addrs := ingressAddresses(live)
	if len(addrs) == 0 {
		st.setCondition(v1alpha1.ConditionExposed, metav1.ConditionFalse, ReasonIngressPending,
			fmt.Sprintf("waiting for the Ingress controller to give Ingress %s an address; check spec.exposure.ingress.className", live.GetName()))
		return nil
	}
	st.url = resources.PublicURL(ep)
	r.exposed(st, ReasonLoadBalanced, fmt.Sprintf("Ingress %s has address %s; public URL %s",
		live.GetName(), strings.Join(addrs, ", "), st.url))
	return nil
}

func ingressAddresses(live *unstructured.Unstructured) []string {
	ing := &networkingv1.Ingress{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(live.Object, ing); err != nil {
		return nil
	}
	var addrs []string
	for _, lb := range ing.Status.LoadBalancer.Ingress {
		switch {
		case lb.Hostname != "":
			addrs = append(addrs, lb.Hostname)
		case lb.IP != "":
			addrs = append(addrs, lb.IP)
		}
	}
	return addrs
}

func (r *WebhookEndpointReconciler) exposed(st *state, reason, msg string) {
	if st.transitioned(v1alpha1.ConditionExposed, metav1.ConditionTrue, reason) {
		r.event(st.ep, corev1.EventTypeNormal, EventExposed, "Expose", "%s", msg)
	}
	st.setCondition(v1alpha1.ConditionExposed, metav1.ConditionTrue, reason, msg)
}
