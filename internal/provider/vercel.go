package provider

import "github.com/hookkeeper/hookkeeper/api/v1alpha1"

// ProviderVercel is the spec.provider.type of Vercel.
const ProviderVercel v1alpha1.ProviderType = "Vercel"

// Vercel signs the raw body with HMAC-SHA1 under the webhook's secret (an account
// webhook's secret, or an integration's client secret) and sends the hex MAC in
// x-vercel-signature (Vercel docs, "Webhooks API Reference"). No header and no timestamp
// is signed; the id, type and createdAt (Unix milliseconds) are body fields.
func init() {
	register(bodyHMAC(v1alpha1.HMACSHA1, "x-vercel-signature", "", v1alpha1.EncodingHex, Provider{
		Type: ProviderVercel,
		Preset: Preset{
			ID:         `body.id`,
			Type:       `body.type`,
			EntityKey:  `has(body.payload.deployment) ? body.payload.deployment.id : body.payload.project.id`,
			OccurredAt: `int(body.createdAt) / 1000`,
		},
		Sample: vercelSample,
		Doc:    Doc{Key: "the webhook's secret, or the integration's client secret (raw)"},
	}))
}

func vercelSample(e SampleEvent) (Delivery, error) {
	return jsonDelivery(map[string]any{
		"id": e.ID, "type": e.Type, "createdAt": e.Time.UnixMilli(),
		"payload": map[string]any{"deployment": map[string]any{"id": e.EntityKey}},
	})
}
