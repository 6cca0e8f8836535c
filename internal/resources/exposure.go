package resources

import (
	"fmt"
	"maps"
	"strings"

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

// exposureTarget is what one HTTPRoute or Ingress publishes: an endpoint's own
// receivers, or a pool's.
type exposureTarget struct {
	// name, namespace and labels of the route object.
	name, namespace string
	labels          map[string]string
	exposure        *v1alpha1.ExposureSpec
	// service is the receivers' Service.
	service string
	// exposedPath is the public path prefix; servedPath what the receivers serve under
	// it (an HTTPRoute rewrites one to the other).
	exposedPath, servedPath string
}

func endpointExposure(ep *v1alpha1.WebhookEndpoint) exposureTarget {
	return exposureTarget{name: ExposureName(ep), namespace: ep.Namespace, labels: Labels(ep, ComponentReceiver),
		exposure: ep.Spec.Exposure, service: ReceiverName(ep), exposedPath: ExposedPath(ep), servedPath: ReceiverPath(ep)}
}

func poolExposure(pool *v1alpha1.WebhookReceiverPool) exposureTarget {
	return exposureTarget{name: PoolName(pool.Name), namespace: pool.Namespace, labels: PoolLabels(pool),
		exposure: pool.Spec.Exposure, service: PoolName(pool.Name), exposedPath: PoolExposedPath(pool), servedPath: "/"}
}

// PoolExposedPath is the public path prefix of an exposed pool: its HTTPRoute's path,
// else /.
func PoolExposedPath(pool *v1alpha1.WebhookReceiverPool) string {
	if ex := pool.Spec.Exposure; ex != nil && ex.HTTPRoute != nil && ex.HTTPRoute.Path != "" {
		return ex.HTTPRoute.Path
	}
	return "/"
}

// PoolPublicURL is the https base URL of an exposed pool (no trailing slash; a member
// is served at it + PoolPath), empty when the pool is not exposed.
func PoolPublicURL(pool *v1alpha1.WebhookReceiverPool) string {
	ex := pool.Spec.Exposure
	prefix := strings.TrimSuffix(PoolExposedPath(pool), "/")
	switch {
	case ex == nil:
		return ""
	case ex.HTTPRoute != nil && len(ex.HTTPRoute.Hostnames) > 0:
		return "https://" + ex.HTTPRoute.Hostnames[0] + prefix
	case ex.Ingress != nil:
		return "https://" + ex.Ingress.Host + prefix
	}
	return ""
}

// HTTPRoute routes the endpoint's exposed path prefix to its receivers (httpRoute).
func HTTPRoute(ep *v1alpha1.WebhookEndpoint) *gatewayv1.HTTPRoute {
	return httpRoute(endpointExposure(ep))
}

// PoolHTTPRoute routes the pool's exposed path prefix to its receivers (httpRoute).
func PoolHTTPRoute(pool *v1alpha1.WebhookReceiverPool) *gatewayv1.HTTPRoute {
	return httpRoute(poolExposure(pool))
}

// Ingress routes the endpoint's exposed path prefix to its receivers (ingress).
func Ingress(ep *v1alpha1.WebhookEndpoint) *networkingv1.Ingress {
	return ingress(endpointExposure(ep))
}

// PoolIngress routes the pool's host to its receivers (ingress).
func PoolIngress(pool *v1alpha1.WebhookReceiverPool) *networkingv1.Ingress {
	return ingress(poolExposure(pool))
}

// httpRoute routes the exposed path prefix on the given hostnames to the receivers'
// Service's webhook port only; the metrics port is never routed.
func httpRoute(t exposureTarget) *gatewayv1.HTTPRoute {
	spec := t.exposure.HTTPRoute
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
			Value: ptr.To(t.exposedPath),
		}}},
		BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{
			BackendObjectReference: gatewayv1.BackendObjectReference{
				Group: ptr.To(gatewayv1.Group("")),
				Kind:  ptr.To(gatewayv1.Kind("Service")),
				Name:  gatewayv1.ObjectName(t.service),
				Port:  ptr.To(gatewayv1.PortNumber(ServicePortHTTP)),
			},
			Weight: ptr.To[int32](1),
		}}},
	}
	if t.exposedPath != t.servedPath {
		// The receivers serve exactly servedPath: rewrite the public prefix to it.
		rule.Filters = []gatewayv1.HTTPRouteFilter{{
			Type: gatewayv1.HTTPRouteFilterURLRewrite,
			URLRewrite: &gatewayv1.HTTPURLRewriteFilter{Path: &gatewayv1.HTTPPathModifier{
				Type:               gatewayv1.PrefixMatchHTTPPathModifier,
				ReplacePrefixMatch: ptr.To(t.servedPath),
			}},
		}}
	}
	return &gatewayv1.HTTPRoute{
		TypeMeta:   metav1.TypeMeta{APIVersion: gatewayv1.GroupVersion.String(), Kind: "HTTPRoute"},
		ObjectMeta: metav1.ObjectMeta{Name: t.name, Namespace: t.namespace, Labels: t.labels},
		Spec: gatewayv1.HTTPRouteSpec{
			CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: parents},
			Hostnames:       hosts,
			Rules:           []gatewayv1.HTTPRouteRule{rule},
		},
	}
}

// ingress routes the exposed path prefix on the host to the receivers' Service's
// webhook port, with TLS when a certificate Secret is named.
func ingress(t exposureTarget) *networkingv1.Ingress {
	spec := t.exposure.Ingress
	var annotations map[string]string
	if len(spec.Annotations) > 0 {
		annotations = maps.Clone(spec.Annotations)
	}
	ing := &networkingv1.Ingress{
		TypeMeta: metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "Ingress"},
		ObjectMeta: metav1.ObjectMeta{
			Name: t.name, Namespace: t.namespace, Labels: t.labels, Annotations: annotations,
		},
		Spec: networkingv1.IngressSpec{
			Rules: []networkingv1.IngressRule{{
				Host: spec.Host,
				IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
					Paths: []networkingv1.HTTPIngressPath{{
						Path:     t.exposedPath,
						PathType: ptr.To(networkingv1.PathTypePrefix),
						Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
							Name: t.service,
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
