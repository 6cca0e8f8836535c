package provider

import "github.com/hookkeeper/hookkeeper/api/v1alpha1"

// ProviderPaystack is the spec.provider.type of Paystack.
const ProviderPaystack v1alpha1.ProviderType = "Paystack"

// Paystack signs the raw body with HMAC-SHA512 under the integration's secret key
// (sk_live_... / sk_test_...) and sends the hex MAC in x-paystack-signature (Paystack
// docs, "Webhooks", signature validation). No header and no timestamp is signed, and the
// event envelope ({"event", "data"}) has no event id, so the id is the body digest.
func init() {
	register(bodyHMAC(v1alpha1.HMACSHA512, "x-paystack-signature", "", v1alpha1.EncodingHex, Provider{
		Type: ProviderPaystack,
		Preset: Preset{
			// event + data.id would merge genuine repeats such as two invoice.update
			// events of one invoice; the digest of the signed body does not.
			ID:         `signed.digest`,
			Type:       `body.event`,
			EntityKey:  `has(body.data.reference) ? body.data.reference : body.data.id`,
			Amount:     `body.data.amount`,
			OccurredAt: `has(body.data.paid_at) && body.data.paid_at != null ? body.data.paid_at : body.data.created_at`,
		},
		Sample: paystackSample,
		Doc:    Doc{Key: "the secret key (`sk_live_…` / `sk_test_…`, raw)"},
	}))
}

func paystackSample(e SampleEvent) (Delivery, error) {
	return jsonDelivery(map[string]any{
		"event": e.Type,
		"data":  map[string]any{"id": e.ID, "reference": e.EntityKey, "created_at": rfc3339(e.Time)},
	})
}
