package provider

import "github.com/hookkeeper/hookkeeper/api/v1alpha1"

// Stripe signs `{t}.{body}` with HMAC-SHA256 under the whole endpoint secret
// (`whsec_...`, prefix included) and sends `Stripe-Signature: t=<unix>,v1=<hex>`, one v1
// per secret during Stripe's own roll.
func init() {
	register(stripeStyle("Stripe-Signature", Provider{
		Type: v1alpha1.ProviderStripe,
		Preset: Preset{
			ID:         `body.id`,
			Type:       `body.type`,
			EntityKey:  `body.data.object.id`,
			Amount:     `body.data.object.amount`,
			OccurredAt: `body.created`,
		},
		Refetch: true,
		Sample:  stripeSample,
		Doc:     Doc{Key: "`whsec_…` as shown, used whole"},
	}))
}

// stripeSample is a PaymentIntent event; the entity key is the object's id (the
// preset) and, in its metadata, order_id and client_txn_id: an app's own order key
// travels in the PaymentIntent's metadata, and those are the keys the quick start and
// the orders sample read it from.
func stripeSample(e SampleEvent) (Delivery, error) {
	return jsonDelivery(map[string]any{
		"id": e.ID, "object": "event", "type": e.Type, "created": e.Time.Unix(), "livemode": false,
		"data": map[string]any{"object": map[string]any{
			"id": e.EntityKey, "object": "payment_intent",
			"metadata": map[string]string{"order_id": e.EntityKey, "client_txn_id": e.EntityKey},
		}},
	})
}
