package provider

import "github.com/hookkeeper/hookkeeper/api/v1alpha1"

// ProviderIntercom is the spec.provider.type of Intercom.
const ProviderIntercom v1alpha1.ProviderType = "Intercom"

// Intercom signs the raw body with HMAC-SHA1 under the app's client secret and sends
// `X-Hub-Signature: sha1=<hex>` (Intercom API reference, "Signed
// Notifications"). No header and no timestamp is signed. The notification's id
// (notif_...) and created_at are body fields, so they are signed.
func init() {
	register(bodyHMAC(v1alpha1.HMACSHA1, "X-Hub-Signature", "sha1=", v1alpha1.EncodingHex, Provider{
		Type: ProviderIntercom,
		Preset: Preset{
			ID:         `body.id`,
			Type:       `body.topic`,
			EntityKey:  `body.data.item.id`,
			OccurredAt: `body.created_at`,
		},
		Sample: intercomSample,
		Doc:    Doc{Key: "the app's client secret (raw)"},
	}))
}

func intercomSample(e SampleEvent) (Delivery, error) {
	return jsonDelivery(map[string]any{
		"type": "notification_event", "id": e.ID, "topic": e.Type, "created_at": e.Time.Unix(),
		"data": map[string]any{"item": map[string]any{"id": e.EntityKey}},
	})
}
