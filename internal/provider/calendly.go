package provider

import "github.com/hookkeeper/hookkeeper/api/v1alpha1"

// ProviderCalendly is the spec.provider.type of Calendly.
const ProviderCalendly v1alpha1.ProviderType = "Calendly"

// Calendly signs `{t}.{body}` with HMAC-SHA256 under the webhook signing key (the
// signing_key given when the subscription was created, or the one Calendly generated
// for an OAuth app) and sends `Calendly-Webhook-Signature: t=<unix>,v1=<hex>` (Calendly
// developer docs, "Webhook Signatures"). The timestamp and the body are signed; no
// header is. The body has no event id ({"event", "created_at", "created_by",
// "payload"}), so the id is the digest of the signed body: a retry resends the same
// body and is a duplicate.
func init() {
	register(stripeStyle("Calendly-Webhook-Signature", Provider{
		Type: ProviderCalendly,
		Preset: Preset{
			// Calendly puts no event id in the body, and an event name and resource
			// pair need not be unique (a resource can change more than once), so the
			// signed body itself is the id.
			ID:   `signed.digest`,
			Type: `body.event`,
			// The resource the event is about: the invitee for invitee.created and
			// invitee.canceled (a reschedule cancels one invitee and creates another).
			EntityKey:  `body.payload.uri`,
			OccurredAt: `body.created_at`,
		},
		Sample: calendlySample,
		Doc:    Doc{Key: "the webhook signing key (raw)"},
	}))
}

func calendlySample(e SampleEvent) (Delivery, error) {
	return jsonDelivery(map[string]any{
		"event": e.Type, "created_at": rfc3339(e.Time),
		"payload":   map[string]any{"uri": e.EntityKey},
		testIDField: e.ID,
	})
}
