package provider

import "github.com/hookkeeper/hookkeeper/api/v1alpha1"

// ProviderRazorpay is the spec.provider.type of Razorpay.
const ProviderRazorpay v1alpha1.ProviderType = "Razorpay"

// Razorpay signs the raw body with HMAC-SHA256 under the webhook secret and sends the hex
// MAC in X-Razorpay-Signature (Razorpay docs, "Validate and Test Webhooks"). Nothing else
// is signed: not X-Razorpay-Event-Id, which Razorpay names as the duplicate key, and no
// timestamp. The body carries no event id either, so the id is the body digest: Razorpay
// retries and dashboard replays resend the event "exactly as originally generated".
func init() {
	register(bodyHMAC(v1alpha1.HMACSHA256, "X-Razorpay-Signature", "", v1alpha1.EncodingHex, Provider{
		Type: ProviderRazorpay,
		Preset: Preset{
			// X-Razorpay-Event-Id is not signed: an id read from it would let a replay
			// under a new header value become a new event.
			ID:   `signed.digest`,
			Type: `body.event`,
			// The order a payment belongs to (payment.*, order.paid, refund.* carry the
			// payment), else the event's first entity (subscriptions, payouts, ...).
			EntityKey: `has(body.payload.payment) && has(body.payload.payment.entity.order_id) && body.payload.payment.entity.order_id != null ? ` +
				`body.payload.payment.entity.order_id : ` +
				`has(body.payload.order) ? body.payload.order.entity.id : body.payload[body.contains[0]].entity.id`,
			// The amount of the entity the event is about: the refund for refund.*, the
			// payment for payment.* and order.paid (paise).
			Amount:     `body.payload[body.contains[0]].entity.amount`,
			OccurredAt: `body.created_at`,
		},
		Sample: razorpaySample,
		Doc:    Doc{Key: "the webhook secret set in the Dashboard (raw)"},
	}))
}

// razorpaySample is a payment event of the order the entity key names.
func razorpaySample(e SampleEvent) (Delivery, error) {
	return jsonDelivery(map[string]any{
		"entity": "event", "event": e.Type, "contains": []string{"payment"}, "created_at": e.Time.Unix(),
		"payload": map[string]any{"payment": map[string]any{"entity": map[string]any{
			"id": e.ID, "order_id": e.EntityKey,
		}}},
	})
}
