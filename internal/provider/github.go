package provider

import (
	"crypto/sha256"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// GitHub signs the body with HMAC-SHA256 and sends `X-Hub-Signature-256: sha256=<hex>`.
// Neither X-GitHub-Delivery nor X-GitHub-Event is signed.
func init() {
	register(Provider{
		Type:        v1alpha1.ProviderGitHub,
		Scheme:      bodyScheme("X-Hub-Signature-256", "sha256=", v1alpha1.EncodingHex),
		Hash:        sha256.New,
		KeyEncoding: v1alpha1.KeyRaw,
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
		Doc: Doc{
			Scheme: "HMAC-SHA256 hex in `X-Hub-Signature-256: sha256=…`",
			Signed: "the body",
			Key:    "the webhook secret (raw)",
			Source: "[GitHub](#github)",
		},
	})
}
