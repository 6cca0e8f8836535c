package provider

import "github.com/hookkeeper/hookkeeper/api/v1alpha1"

// Shopify signs the body with HMAC-SHA256 under the app's client secret and sends the
// base64 MAC in X-Shopify-Hmac-Sha256. No header is signed.
func init() {
	register(bodyHMAC(v1alpha1.HMACSHA256, "X-Shopify-Hmac-Sha256", "", v1alpha1.EncodingBase64, Provider{
		Type: v1alpha1.ProviderShopify,
		Preset: Preset{
			// The topic is in no signed field, so it stays the type and is bound into the
			// id: one body under two topics (orders/paid and orders/updated render the
			// same order) is two events, and replaying a body with a new
			// X-Shopify-Webhook-Id or X-Shopify-Triggered-At is a duplicate.
			ID:         `headers["x-shopify-topic"] + ":" + signed.digest`,
			Type:       `headers["x-shopify-topic"]`,
			EntityKey:  `body.id`,
			OccurredAt: `has(body.updated_at) ? body.updated_at : body.created_at`,
		},
		Sample: shopifySample,
		Doc:    Doc{Key: "the app's client secret (raw)"},
	}))
}

// shopifySample is a resource of the entity key's id under topic X-Shopify-Topic.
func shopifySample(e SampleEvent) (Delivery, error) {
	return jsonDelivery(map[string]any{
		"id": e.EntityKey, "created_at": rfc3339(e.Time), testIDField: e.ID,
	}, "X-Shopify-Topic", e.Type, "X-Shopify-Webhook-Id", e.ID)
}
