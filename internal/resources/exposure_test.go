package resources

import (
	"testing"

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
