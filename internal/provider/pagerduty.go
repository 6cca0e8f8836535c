package provider

import (
	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// ProviderPagerDuty is the spec.provider.type of PagerDuty (v3 webhooks).
const ProviderPagerDuty v1alpha1.ProviderType = "PagerDuty"

// PagerDuty v3 webhooks sign the raw body with HMAC-SHA256 under the subscription's
// secret and send `X-PagerDuty-Signature: v1=<hex>[,v1=<hex>]`, one v1 per secret
// during a rotation; entries of other versions are skipped (PagerDuty developer docs,
// "Verifying Signatures"). Only the body is signed: no timestamp, no header. The body
// is {"event": {"id", "event_type", "resource_type", "occurred_at", "data": {...}}};
// its id is the event id. The older v1/v2 webhook extensions are not supported.
func init() {
	register(fixedHMAC(v1alpha1.HMACSHA256, &signature.Scheme{
		HeaderSets: []signature.HeaderSet{{Signature: "X-PagerDuty-Signature"}},
		Prefix:     "v1=",
		Separator:  ",",
		Encoding:   v1alpha1.EncodingHex,
		Template:   signature.MustTemplate("{body}"),
	}, Provider{
		Type: ProviderPagerDuty,
		Preset: Preset{
			ID:   `body.event.id`,
			Type: `body.event.event_type`,
			// The incident (or service, ...) the event is about; a pagey.ping carries
			// no data id and leaves it empty.
			EntityKey:  `body.event.data.id`,
			OccurredAt: `body.event.occurred_at`,
		},
		Sample: pagerdutySample,
		Doc: Doc{
			Signed: "the body",
			Key:    "the webhook subscription's secret (raw)",
		},
	}))
}

func pagerdutySample(e SampleEvent) (Delivery, error) {
	return jsonDelivery(map[string]any{"event": map[string]any{
		"id": e.ID, "event_type": e.Type, "resource_type": "incident", "occurred_at": rfc3339(e.Time),
		"data": map[string]any{"id": e.EntityKey},
	}})
}
