package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// An Ingress forwards the path unchanged, so an ingress.path other than receiver.path
// would make every webhook a 404: Validate names the field. Empty or equal is fine, and
// an HTTPRoute (which rewrites) may use another prefix.
func TestValidateIngressPath(t *testing.T) {
	cases := []struct {
		name          string
		receiver      string
		exposure      *v1alpha1.ExposureSpec
		wantFieldPath bool
	}{
		{"no exposure", "/stripe", nil, false},
		{"ingress path empty", "/stripe", &v1alpha1.ExposureSpec{Ingress: &v1alpha1.IngressExposure{Host: "h"}}, false},
		{"ingress path equal", "/stripe", &v1alpha1.ExposureSpec{Ingress: &v1alpha1.IngressExposure{Host: "h", Path: "/stripe"}}, false},
		{"ingress path equal to the default", "", &v1alpha1.ExposureSpec{Ingress: &v1alpha1.IngressExposure{Host: "h", Path: "/"}}, false},
		{"httpRoute path differs", "/stripe", &v1alpha1.ExposureSpec{HTTPRoute: &v1alpha1.HTTPRouteExposure{Hostnames: []string{"h"}, Path: "/public"}}, false},
		{"ingress path differs", "/stripe", &v1alpha1.ExposureSpec{Ingress: &v1alpha1.IngressExposure{Host: "h", Path: "/public"}}, true},
		{"ingress path differs from the default", "", &v1alpha1.ExposureSpec{Ingress: &v1alpha1.IngressExposure{Host: "h", Path: "/public"}}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			we := validEndpoint(t)
			we.Spec.Receiver.Path = tc.receiver
			we.Spec.Exposure = tc.exposure
			err := Validate(we)
			if !tc.wantFieldPath {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate accepted an ingress.path that differs from receiver.path")
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("error is %T, want *ValidationError", err)
			}
			for _, want := range []string{`spec.exposure.ingress.path: "/public" differs from spec.receiver.path`, "404"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Validate = %q\nwant it to contain %q", err, want)
				}
			}
		})
	}
}
