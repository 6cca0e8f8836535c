package provider

import (
	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// ProviderPaddle is the spec.provider.type of Paddle Billing.
const ProviderPaddle v1alpha1.ProviderType = "Paddle"

// Paddle Billing signs `{ts}:{body}` with HMAC-SHA256 under the notification
// destination's secret key (`pdl_ntfset_…`, used whole as the key) and sends
// `Paddle-Signature: ts=<unix>;h1=<hex>`, with more than one h1 while a secret rotates
// (Paddle docs, "Verify webhook signatures"). The timestamp and the body are signed;
// no header is. The body carries the event id (event_id, the same on every retry and
// replay of the event), the event type and the time the event occurred. Paddle Classic's
// p_signature form fields (RSA over a PHP-serialized array) are a different scheme and
// are not supported.
func init() {
	register(fixedHMAC(v1alpha1.HMACSHA256, &signature.Scheme{
		HeaderSets: []signature.HeaderSet{{Signature: "Paddle-Signature"}},
		Composite:  &signature.Composite{PairSeparator: ";", KeyValueSeparator: "=", TimestampKey: "ts", SignatureKey: "h1"},
		Encoding:   v1alpha1.EncodingHex,
		Template:   signature.MustTemplate("{timestamp}:{body}"),
	}, Provider{
		Type: ProviderPaddle,
		Preset: Preset{
			// event_id, not notification_id: a notification is one delivery of the event
			// to one destination, and the event is what happened.
			ID:        `body.event_id`,
			Type:      `body.event_type`,
			EntityKey: `body.data.id`,
			// Transactions carry their totals as strings of minor units; other entities
			// have no amount and leave it empty.
			Amount:     `body.data.details.totals.grand_total`,
			OccurredAt: `body.occurred_at`,
		},
		Sample: paddleSample,
		Doc: Doc{
			Signed:    "`ts`, `:` and the body",
			Timestamp: "`ts`",
			Key:       "the notification destination's secret key (`pdl_ntfset_…`), used whole (raw)",
		},
	}))
}

func paddleSample(e SampleEvent) (Delivery, error) {
	return jsonDelivery(map[string]any{
		"event_id": e.ID, "event_type": e.Type, "occurred_at": rfc3339(e.Time),
		"data": map[string]any{"id": e.EntityKey},
	})
}
