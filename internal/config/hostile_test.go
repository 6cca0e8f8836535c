package config

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// The refetch API key goes to baseURL: plain http needs allowInsecureHTTP, and the
// error names the field.
func TestValidateRefetchBaseURLNeedsHTTPS(t *testing.T) {
	refetch := func(baseURL string, insecure bool) *v1alpha1.RefetchSpec {
		return &v1alpha1.RefetchSpec{
			APIKeySecretRef:   corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "stripe-api"}, Key: "key"},
			BaseURL:           baseURL,
			AllowInsecureHTTP: insecure,
			Transitions:       []string{"capture"},
		}
	}
	for name, tc := range map[string]struct {
		spec    *v1alpha1.RefetchSpec
		wantErr string
	}{
		"default API":             {refetch("", false), ""},
		"https":                   {refetch("https://stripe-proxy.internal", false), ""},
		"http":                    {refetch("http://evil.example", false), "spec.provider.refetch.allowInsecureHTTP"},
		"HTTP upper case":         {refetch("HTTP://evil.example", false), "spec.provider.refetch.baseURL: must be https"},
		"http allowed for a stub": {refetch("http://127.0.0.1:8081", true), ""},
	} {
		t.Run(name, func(t *testing.T) {
			we := validEndpoint(t)
			we.Spec.Provider.Refetch = tc.spec
			err := Validate(we)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Validate = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestValidateMaxInFlight(t *testing.T) {
	for _, n := range []int32{-1, 4097} {
		we := validEndpoint(t)
		we.Spec.Receiver.MaxInFlight = n
		if err := Validate(we); err == nil || !strings.Contains(err.Error(), "spec.receiver.maxInFlight") {
			t.Errorf("maxInFlight %d: Validate = %v, want an error naming spec.receiver.maxInFlight", n, err)
		}
	}
	we := validEndpoint(t)
	if we.Spec.Receiver.MaxInFlight != v1alpha1.DefaultMaxInFlight {
		t.Errorf("defaulted maxInFlight %d, want %d", we.Spec.Receiver.MaxInFlight, v1alpha1.DefaultMaxInFlight)
	}
}
