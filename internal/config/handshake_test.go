package config_test

import (
	"testing"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
)

func TestHandshake(t *testing.T) {
	challenge := []byte(`{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`)
	cases := []struct {
		name     string
		provider v1alpha1.ProviderType
		body     []byte
		want     string
	}{
		{"slack challenge is echoed", v1alpha1.ProviderSlack, challenge,
			`{"challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}`},
		{"slack event is a delivery", v1alpha1.ProviderSlack, []byte(`{"type":"event_callback","event_id":"Ev1"}`), ""},
		{"slack challenge without a value", v1alpha1.ProviderSlack, []byte(`{"type":"url_verification"}`), ""},
		{"not JSON", v1alpha1.ProviderSlack, []byte(`payload=%7B%7D`), ""},
		{"other providers never handshake", v1alpha1.ProviderStripe, challenge, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ct, resp, ok := config.Handshake(tc.provider, tc.body)
			if ok != (tc.want != "") {
				t.Fatalf("ok = %v, want %v", ok, tc.want != "")
			}
			if ok && (string(resp) != tc.want || ct != "application/json") {
				t.Fatalf("response %s (%s), want %s", resp, ct, tc.want)
			}
		})
	}
}
