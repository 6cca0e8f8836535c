package provider

import (
	"net/http"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v85/webhook"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// Stripe publishes no fixed vector, so its official SDK signs here: a request signed by
// stripe-go's webhook package verifies, and so does the computed vector in
// testdata/vectors.json under stripe-go's own check; a changed body fails both.
func TestStripeAgreesWithStripeGo(t *testing.T) {
	const secret = "whsec_hookkeeper_stripe_go_agreement"
	now := time.Unix(1767225600, 0)
	body := []byte(`{"id":"evt_sdk","object":"event","type":"payment_intent.succeeded","data":{"object":{"id":"pi_sdk","amount":4200}}}`)
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: now})
	verifier, err := NewVerifier(v1alpha1.ProviderSpec{Type: v1alpha1.ProviderStripe}, []signature.Secret{{Value: secret}})
	if err != nil {
		t.Fatal(err)
	}
	req := signature.Request{Header: http.Header{"Stripe-Signature": {signed.Header}}, Body: body, Method: http.MethodPost, Now: now}
	if _, err := verifier.Open(req); err != nil {
		t.Fatalf("a stripe-go signature does not verify: %v", err)
	}
	req.Body = append([]byte(nil), body...)
	req.Body[len(req.Body)-2] = '1'
	if signature.ReasonOf(verifier.Verify(req)) != signature.ReasonMismatch {
		t.Fatal("a changed body verified")
	}

	v := vectorNamed(t, "stripe-computed")
	if err := webhook.ValidatePayloadIgnoringTolerance([]byte(v.Body), v.Headers["Stripe-Signature"], v.Secret); err != nil {
		t.Fatalf("stripe-go refuses the computed vector: %v", err)
	}
	if err := webhook.ValidatePayloadIgnoringTolerance([]byte(v.Body+" "), v.Headers["Stripe-Signature"], v.Secret); err == nil {
		t.Fatal("stripe-go accepts the vector with a changed body: the check is vacuous")
	}
}
