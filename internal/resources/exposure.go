package resources

import (
	"fmt"
	"maps"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// ReceiverPath is the path the receiver accepts webhooks on.
func ReceiverPath(ep *v1alpha1.WebhookEndpoint) string {
	if ep.Spec.Receiver.Path == "" {
		return "/"
	}
	return ep.Spec.Receiver.Path
}

// ExposedPath is the public path prefix: the exposure's own path or the receiver path.
func ExposedPath(ep *v1alpha1.WebhookEndpoint) string {
	if ex := ep.Spec.Exposure; ex != nil {
		switch {
		case ex.HTTPRoute != nil && ex.HTTPRoute.Path != "":
			return ex.HTTPRoute.Path
		case ex.Ingress != nil && ex.Ingress.Path != "":
			return ex.Ingress.Path
		}
	}
	return ReceiverPath(ep)
}

// InClusterURL is where pods in the cluster reach the receiver.
func InClusterURL(ep *v1alpha1.WebhookEndpoint) string {
	return fmt.Sprintf("http://%s.%s.svc%s", ReceiverName(ep), ep.Namespace, ReceiverPath(ep))
}

// PublicURL is the https URL of an exposed endpoint, empty when it is not exposed.
func PublicURL(ep *v1alpha1.WebhookEndpoint) string {
	ex := ep.Spec.Exposure
	switch {
	case ex == nil:
		return ""
	case ex.HTTPRoute != nil && len(ex.HTTPRoute.Hostnames) > 0:
		return "https://" + ex.HTTPRoute.Hostnames[0] + ExposedPath(ep)
	case ex.Ingress != nil:
		return "https://" + ex.Ingress.Host + ExposedPath(ep)
	}
	return ""
}

// HTTPRoute routes the exposed path prefix on the given hostnames to the receiver
// Service's webhook port only; the metrics port is never routed.
func HTTPRoute(ep *v1alpha1.WebhookEndpoint) *gatewayv1.HTTPRoute {
	spec := ep.Spec.Exposure.HTTPRoute
	parents := make([]gatewayv1.ParentReference, 0, len(spec.ParentRefs))
	for _, p := range spec.ParentRefs {
		ref := gatewayv1.ParentReference{
			Group: ptr.To(gatewayv1.Group(gatewayv1.GroupName)),
			Kind:  ptr.To(gatewayv1.Kind("Gateway")),
			Name:  gatewayv1.ObjectName(p.Name),
		}
		if p.Namespace != "" {
			ref.Namespace = ptr.To(gatewayv1.Namespace(p.Namespace))
		}
		if p.SectionName != "" {
			ref.SectionName = ptr.To(gatewayv1.SectionName(p.SectionName))
		}
		parents = append(parents, ref)
	}
	hosts := make([]gatewayv1.Hostname, 0, len(spec.Hostnames))
	for _, h := range spec.Hostnames {
		hosts = append(hosts, gatewayv1.Hostname(h))
	}
	rule := gatewayv1.HTTPRouteRule{
		Matches: []gatewayv1.HTTPRouteMatch{{Path: &gatewayv1.HTTPPathMatch{
			Type:  ptr.To(gatewayv1.PathMatchPathPrefix),
			Value: ptr.To(ExposedPath(ep)),
		}}},
		BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{
			BackendObjectReference: gatewayv1.BackendObjectReference{
				Group: ptr.To(gatewayv1.Group("")),
				Kind:  ptr.To(gatewayv1.Kind("Service")),
				Name:  gatewayv1.ObjectName(ReceiverName(ep)),
				Port:  ptr.To(gatewayv1.PortNumber(ServicePortHTTP)),
			},
			Weight: ptr.To[int32](1),
		}}},
	}
	if ExposedPath(ep) != ReceiverPath(ep) {
		// The receiver serves exactly spec.receiver.path: rewrite the public prefix to it.
		rule.Filters = []gatewayv1.HTTPRouteFilter{{
			Type: gatewayv1.HTTPRouteFilterURLRewrite,
			URLRewrite: &gatewayv1.HTTPURLRewriteFilter{Path: &gatewayv1.HTTPPathModifier{
				Type:               gatewayv1.PrefixMatchHTTPPathModifier,
				ReplacePrefixMatch: ptr.To(ReceiverPath(ep)),
			}},
		}}
	}
	return &gatewayv1.HTTPRoute{
		TypeMeta: metav1.TypeMeta{APIVersion: gatewayv1.GroupVersion.String(), Kind: "HTTPRoute"},
		ObjectMeta: metav1.ObjectMeta{
			Name: ExposureName(ep), Namespace: ep.Namespace, Labels: Labels(ep, ComponentReceiver),
		},
		Spec: gatewayv1.HTTPRouteSpec{
			CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: parents},
			Hostnames:       hosts,
			Rules:           []gatewayv1.HTTPRouteRule{rule},
		},
	}
}

// Ingress routes the exposed path prefix on the host to the receiver Service's webhook
// port, with TLS when a certificate Secret is named.
func Ingress(ep *v1alpha1.WebhookEndpoint) *networkingv1.Ingress {
	spec := ep.Spec.Exposure.Ingress
	var annotations map[string]string
	if len(spec.Annotations) > 0 {
		annotations = maps.Clone(spec.Annotations)
	}
	ing := &networkingv1.Ingress{
		TypeMeta: metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "Ingress"},
		ObjectMeta: metav1.ObjectMeta{
			Name: ExposureName(ep), Namespace: ep.Namespace, Labels: Labels(ep, ComponentReceiver),
			Annotations: annotations,
		},
		Spec: networkingv1.IngressSpec{
			Rules: []networkingv1.IngressRule{{
				Host: spec.Host,
				IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
					Paths: []networkingv1.HTTPIngressPath{{
						Path:     ExposedPath(ep),
						PathType: ptr.To(networkingv1.PathTypePrefix),
						Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
							Name: ReceiverName(ep),
							Port: networkingv1.ServiceBackendPort{Name: PortNameHTTP},
						}},
					}},
				}},
			}},
		},
	}
	if spec.ClassName != "" {
		ing.Spec.IngressClassName = ptr.To(spec.ClassName)
	}
	if spec.TLSSecretName != "" {
		ing.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{spec.Host}, SecretName: spec.TLSSecretName}}
	}
	return ing
}
