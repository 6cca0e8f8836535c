package provider

import "github.com/hookkeeper/hookkeeper/api/v1alpha1"

// GitHub signs the body with HMAC-SHA256 and sends `X-Hub-Signature-256: sha256=<hex>`.
// Neither X-GitHub-Delivery nor X-GitHub-Event is signed.
func init() {
	register(bodyHMAC(v1alpha1.HMACSHA256, "X-Hub-Signature-256", "sha256=", v1alpha1.EncodingHex, Provider{
		Type: v1alpha1.ProviderGitHub,
		Preset: Preset{
			// A redelivery resends the same body, so the body digest dedupes it; a
			// captured body replayed under another X-GitHub-Event (or delivery id) is a
			// duplicate too.
			ID:   `signed.digest`,
			Type: `headers["x-github-event"] + (has(body.action) ? "." + string(body.action) : "")`,
			EntityKey: `has(body.pull_request) ? body.pull_request.html_url : ` +
				`has(body.issue) ? body.issue.html_url : body.repository.full_name`,
		},
		Sample: repositorySample("X-GitHub-Event", "X-GitHub-Delivery"),
		Doc:    Doc{Key: "the webhook secret (raw)"},
	}))
}
