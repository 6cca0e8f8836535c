package provider

import "github.com/hookkeeper/hookkeeper/api/v1alpha1"

// ProviderTypeform is the spec.provider.type of Typeform.
const ProviderTypeform v1alpha1.ProviderType = "Typeform"

// Typeform signs the raw body with HMAC-SHA256 under the secret set on the webhook and
// sends `Typeform-Signature: sha256=<base64>` (Typeform docs, "Secure your webhooks").
// No header and no timestamp is signed; event_id, event_type and the response's
// submitted_at are body fields.
func init() {
	register(bodyHMAC(v1alpha1.HMACSHA256, "Typeform-Signature", "sha256=", v1alpha1.EncodingBase64, Provider{
		Type: ProviderTypeform,
		Preset: Preset{
			ID:         `body.event_id`,
			Type:       `body.event_type`,
			EntityKey:  `body.form_response.token`,
			OccurredAt: `body.form_response.submitted_at`,
		},
		Sample: typeformSample,
		Doc:    Doc{Key: "the webhook's `secret` (raw)"},
	}))
}

func typeformSample(e SampleEvent) (Delivery, error) {
	return jsonDelivery(map[string]any{
		"event_id": e.ID, "event_type": e.Type,
		"form_response": map[string]any{"token": e.EntityKey, "submitted_at": rfc3339(e.Time)},
	})
}
