package provider

import (
	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// ProviderSquare is the spec.provider.type of Square.
const ProviderSquare v1alpha1.ProviderType = "Square"

// Square signs the notification URL followed by the raw body with HMAC-SHA256 under the
// subscription's signature key and sends the base64 MAC in
// x-square-hmacsha256-signature (Square developer docs, "Validate notifications"; the
// WebhooksHelper of Square's SDKs). The URL is the one configured for the subscription,
// byte for byte, so it is spec.provider.signedURL. Only the URL and the body are signed:
// no timestamp, no header. The body carries event_id (the same on every retry), type,
// created_at and data.id. The legacy x-square-signature (HMAC-SHA1) is not read.
func init() {
	register(fixedHMAC(v1alpha1.HMACSHA256, &signature.Scheme{
		HeaderSets: []signature.HeaderSet{{Signature: "x-square-hmacsha256-signature"}},
		Encoding:   v1alpha1.EncodingBase64,
		Template:   signature.MustTemplate("{url}{body}"),
	}, Provider{
		Type: ProviderSquare,
		Preset: Preset{
			ID:        `body.event_id`,
			Type:      `body.type`,
			EntityKey: `body.data.id`,
			// payment.* and refund.* carry the money object; other events leave it empty.
			Amount: `has(body.data.object.payment) ? body.data.object.payment.amount_money.amount : ` +
				`body.data.object.refund.amount_money.amount`,
			OccurredAt: `body.created_at`,
		},
		Sample: squareSample,
		Doc: Doc{
			Signed: "`spec.provider.signedURL` (the notification URL) and the body",
			Key:    "the subscription's signature key (raw)",
		},
	}))
}

func squareSample(e SampleEvent) (Delivery, error) {
	return jsonDelivery(map[string]any{
		"type": e.Type, "event_id": e.ID, "created_at": rfc3339(e.Time),
		"data": map[string]any{"id": e.EntityKey},
	})
}
