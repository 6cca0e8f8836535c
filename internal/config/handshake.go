package config

import (
	"encoding/json"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// Handshake answers a provider's endpoint-verification request: a request signed like a
// delivery that carries no event and expects an echo. Slack sends one
// ({"type":"url_verification","challenge":"..."}) when an app's Request URL is set and
// accepts the URL only if the challenge comes back. ok is false for every other body,
// which then goes on to extraction as a delivery. Call it only after the signature
// verified: an unverified challenge must not be echoed.
func Handshake(provider v1alpha1.ProviderType, body []byte) (contentType string, response []byte, ok bool) {
	if provider != v1alpha1.ProviderSlack {
		return "", nil, false
	}
	var req struct {
		Type      string `json:"type"`
		Challenge string `json:"challenge"`
	}
	if json.Unmarshal(body, &req) != nil || req.Type != "url_verification" || req.Challenge == "" {
		return "", nil, false
	}
	resp, err := json.Marshal(map[string]string{"challenge": req.Challenge})
	if err != nil {
		return "", nil, false
	}
	return "application/json", resp, true
}
