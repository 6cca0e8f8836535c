package resources

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

func TestExposure(t *testing.T) {
	ep := endpoint()
	if got := InClusterURL(ep); got != "http://orders-receiver.shop.svc/stripe" {
		t.Errorf("InClusterURL = %s", got)
	}
	ep.Spec.Exposure = &v1alpha1.ExposureSpec{HTTPRoute: &v1alpha1.HTTPRouteExposure{
		ParentRefs: []v1alpha1.ParentReference{{Name: "public", Namespace: "gateways", SectionName: "https"}, {Name: "local"}},
		Hostnames:  []string{"hooks.example.com"},
	}}
	if got := PublicURL(ep); got != "https://hooks.example.com/stripe" {
		t.Errorf("PublicURL = %s", got)
	}
	route := HTTPRoute(ep)
	if len(route.Spec.ParentRefs) != 2 || string(route.Spec.ParentRefs[0].Name) != "public" ||
		string(*route.Spec.ParentRefs[0].Namespace) != "gateways" || string(*route.Spec.ParentRefs[0].SectionName) != "https" ||
		route.Spec.ParentRefs[1].Namespace != nil {
		t.Errorf("parentRefs = %+v", route.Spec.ParentRefs)
	}
	if len(route.Spec.Hostnames) != 1 || route.Spec.Hostnames[0] != "hooks.example.com" {
		t.Errorf("hostnames = %v", route.Spec.Hostnames)
	}
	rule := route.Spec.Rules[0]
	if *rule.Matches[0].Path.Value != "/stripe" || len(rule.BackendRefs) != 1 || len(rule.Filters) != 0 {
		t.Errorf("rule = %+v", rule)
	}
	ep.Spec.Exposure.HTTPRoute.Path = "/hooks/stripe"
	rewritten := HTTPRoute(ep).Spec.Rules[0]
	if *rewritten.Matches[0].Path.Value != "/hooks/stripe" || len(rewritten.Filters) != 1 ||
		*rewritten.Filters[0].URLRewrite.Path.ReplacePrefixMatch != "/stripe" {
		t.Errorf("a public prefix other than the receiver path must be rewritten to it: %+v", rewritten)
	}
	if got := PublicURL(ep); got != "https://hooks.example.com/hooks/stripe" {
		t.Errorf("PublicURL = %s", got)
	}
	ep.Spec.Exposure.HTTPRoute.Path = ""
	be := rule.BackendRefs[0]
	if string(be.Name) != "orders-receiver" || *be.Port != 80 || string(*be.Kind) != "Service" {
		t.Errorf("backend = %+v (only the webhook port may be routed)", be)
	}

	ep.Spec.Exposure = &v1alpha1.ExposureSpec{Ingress: &v1alpha1.IngressExposure{
		ClassName: "nginx", Host: "hooks.example.com", Path: "/in", TLSSecretName: "hooks-tls",
		Annotations: map[string]string{"cert-manager.io/cluster-issuer": "letsencrypt"},
	}}
	ing := Ingress(ep)
	if *ing.Spec.IngressClassName != "nginx" || ing.Annotations["cert-manager.io/cluster-issuer"] != "letsencrypt" {
		t.Errorf("ingress meta = %+v", ing)
	}
	if len(ing.Spec.TLS) != 1 || ing.Spec.TLS[0].SecretName != "hooks-tls" || ing.Spec.TLS[0].Hosts[0] != "hooks.example.com" {
		t.Errorf("tls = %+v", ing.Spec.TLS)
	}
	path := ing.Spec.Rules[0].HTTP.Paths[0]
	if path.Path != "/in" || path.Backend.Service.Name != "orders-receiver" || path.Backend.Service.Port.Name != PortNameHTTP {
		t.Errorf("path = %+v", path)
	}
	if got := PublicURL(ep); got != "https://hooks.example.com/in" {
		t.Errorf("PublicURL = %s", got)
	}
	ep.Spec.Exposure.Ingress.TLSSecretName = ""
	ep.Spec.Exposure.Ingress.ClassName = ""
	if ing := Ingress(ep); ing.Spec.TLS != nil || ing.Spec.IngressClassName != nil {
		t.Errorf("optional fields set: %+v", ing.Spec)
	}
}

// A pool is exposed by the same builders: one route on its Service, the prefix
// rewritten to / (the pool serves /<name>/...), and a base URL its members extend.
func TestPoolExposure(t *testing.T) {
	pool := &v1alpha1.WebhookReceiverPool{ObjectMeta: metav1.ObjectMeta{Name: "shared", Namespace: "shop"}}
	if got := PoolPublicURL(pool); got != "" {
		t.Errorf("PoolPublicURL without exposure = %q, want empty", got)
	}
	pool.Spec.Exposure = &v1alpha1.ExposureSpec{HTTPRoute: &v1alpha1.HTTPRouteExposure{
		ParentRefs: []v1alpha1.ParentReference{{Name: "public"}},
		Hostnames:  []string{"hooks.example.com"},
		Path:       "/hooks/",
	}}
	if got := PoolPublicURL(pool); got != "https://hooks.example.com/hooks" {
		t.Errorf("PoolPublicURL = %s", got)
	}
	route := PoolHTTPRoute(pool)
	if route.Name != PoolName("shared") || route.Namespace != "shop" || route.Labels[LabelComponent] != ComponentPoolReceiver {
		t.Errorf("route meta = %+v", route.ObjectMeta)
	}
	rule := route.Spec.Rules[0]
	if *rule.Matches[0].Path.Value != "/hooks/" || string(rule.BackendRefs[0].Name) != PoolName("shared") {
		t.Errorf("rule = %+v", rule)
	}
	if len(rule.Filters) != 1 || *rule.Filters[0].URLRewrite.Path.ReplacePrefixMatch != "/" {
		t.Errorf("filters = %+v, want the prefix rewritten to /", rule.Filters)
	}
	pool.Spec.Exposure.HTTPRoute.Path = ""
	if rule := PoolHTTPRoute(pool).Spec.Rules[0]; *rule.Matches[0].Path.Value != "/" || len(rule.Filters) != 0 {
		t.Errorf("rule without a prefix = %+v, want / and no rewrite", rule)
	}

	pool.Spec.Exposure = &v1alpha1.ExposureSpec{Ingress: &v1alpha1.IngressExposure{Host: "hooks.example.com"}}
	ing := PoolIngress(pool)
	path := ing.Spec.Rules[0].HTTP.Paths[0]
	if path.Path != "/" || path.Backend.Service.Name != PoolName("shared") || ing.Spec.Rules[0].Host != "hooks.example.com" {
		t.Errorf("ingress rule = %+v", ing.Spec.Rules[0])
	}
	if got := PoolPublicURL(pool); got != "https://hooks.example.com" {
		t.Errorf("PoolPublicURL (ingress) = %s", got)
	}
}
