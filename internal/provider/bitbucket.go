package provider

import "github.com/hookkeeper/hookkeeper/api/v1alpha1"

// ProviderBitbucket is the spec.provider.type of Bitbucket Cloud.
const ProviderBitbucket v1alpha1.ProviderType = "Bitbucket"

// Bitbucket Cloud signs the raw body with HMAC-SHA256 under the webhook's secret and
// sends `X-Hub-Signature: sha256=<hex>` (Bitbucket Cloud docs, "Manage webhooks",
// section "Secure webhooks"; announced in "Introducing enhanced webhook security"). A
// webhook without a secret sends no signature, and no endpoint accepts it. No header and
// no timestamp is signed: X-Event-Key, X-Request-UUID, X-Hook-UUID and X-Attempt-Number
// are not.
func init() {
	register(bodyHMAC(v1alpha1.HMACSHA256, "X-Hub-Signature", "sha256=", v1alpha1.EncodingHex, Provider{
		Type: ProviderBitbucket,
		Preset: Preset{
			// The event key (repo:push, pullrequest:fulfilled) is in no signed field, so it
			// is the type and is bound into the id, as for Shopify's topic: a retry (same
			// body) or a replay under another X-Request-UUID is a duplicate, and one body
			// under two event keys is two events.
			ID:   `headers["x-event-key"] + ":" + signed.digest`,
			Type: `headers["x-event-key"]`,
			EntityKey: `has(body.pullrequest) ? body.pullrequest.links.html.href : ` +
				`has(body.issue) ? body.issue.links.html.href : body.repository.full_name`,
			OccurredAt: `body.pullrequest.updated_on`,
		},
		Sample: repositorySample("X-Event-Key", "X-Request-UUID"),
		Doc:    Doc{Key: "the webhook's secret (raw)"},
	}))
}
