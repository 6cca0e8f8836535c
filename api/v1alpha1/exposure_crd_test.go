package v1alpha1_test

import (
	"testing"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// An Ingress forwards the path unchanged and the receiver serves receiver.path only, so
// the API server refuses an ingress.path that differs from it (every webhook would get
// 404), naming the field; empty or equal is accepted, and so is another HTTPRoute prefix
// (the route rewrites it).
func TestCRDIngressPathMustMatchReceiverPath(t *testing.T) {
	c, ctx := newClient(t)

	ingress := func(path string) *v1alpha1.ExposureSpec {
		return &v1alpha1.ExposureSpec{Ingress: &v1alpha1.IngressExposure{Host: "hooks.example.com", Path: path}}
	}
	cases := []struct {
		name     string
		receiver string
		exposure *v1alpha1.ExposureSpec
		reject   bool
	}{
		{"ingress path empty", "/stripe", ingress(""), false},
		{"ingress path equal", "/stripe", ingress("/stripe"), false},
		{"ingress path equal to the default receiver path", "", ingress("/"), false},
		{"httpRoute path differs", "/stripe", &v1alpha1.ExposureSpec{HTTPRoute: &v1alpha1.HTTPRouteExposure{
			ParentRefs: []v1alpha1.ParentReference{{Name: "public"}}, Hostnames: []string{"hooks.example.com"}, Path: "/public",
		}}, false},
		{"ingress path differs", "/stripe", ingress("/public"), true},
		{"ingress path is a prefix of the receiver path", "/stripe", ingress("/"), true},
		{"ingress path differs from the default receiver path", "", ingress("/stripe"), true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := validEndpoint("ingress-path-" + string(rune('a'+i)))
			w.Spec.Receiver.Path = tc.receiver
			w.Spec.Exposure = tc.exposure
			if tc.reject {
				refused(ctx, t, c, w, "spec.exposure.ingress.path", "must be empty or equal to receiver.path")
			} else {
				admitted(ctx, t, c, w)
			}
		})
	}
}
