package provider

import "github.com/hookkeeper/hookkeeper/api/v1alpha1"

// ProviderResend is Resend, whose webhooks Svix delivers.
const ProviderResend v1alpha1.ProviderType = "Resend"

// Resend sends its webhooks through Svix (Resend docs, "Verify Webhooks Requests"): the
// Standard Webhooks scheme under the svix-* header names, HMAC-SHA256 over
// `{svix-id}.{svix-timestamp}.{body}`, base64 `v1,` entries in svix-signature, and the
// webhook's `whsec_` signing secret.
// svixDelivered verifies and signs it, and fills in its id preset and the doc of the
// scheme; the rest is its own.
func init() {
	register(svixDelivered(Provider{
		Type: ProviderResend,
		Preset: Preset{
			Type: `body.type`,
			// email.* events name the email; contact.* and domain.* events carry data.id.
			EntityKey:  `has(body.data.email_id) ? body.data.email_id : body.data.id`,
			OccurredAt: `body.created_at`,
		},
		Sample: resendSample,
		Doc:    Doc{Key: "the webhook's signing secret, `whsec_…`"},
	}))
}

// resendSample is an event whose svix-id is the event id.
func resendSample(e SampleEvent) (Delivery, error) {
	return signedIDDelivery(e.ID, map[string]any{
		"type": e.Type, "created_at": rfc3339(e.Time), "data": map[string]any{"id": e.EntityKey},
	})
}
