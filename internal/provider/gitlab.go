package provider

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// ProviderGitLab is the spec.provider.type of GitLab's secret-token webhooks.
const ProviderGitLab v1alpha1.ProviderType = "GitLab"

// HeaderGitLabToken carries GitLab's secret token itself.
const HeaderGitLabToken = "X-Gitlab-Token" //nolint:gosec // a header name, not a credential

// gitlabVerifier checks GitLab's secret token (GitLab docs, "Webhooks", section
// "Validate payloads by using a secret token"): GitLab sends the token configured on the
// webhook, verbatim, in X-Gitlab-Token. It is a shared password, not a signature: it
// shows that the sender knows the token, and binds nothing. Whoever holds the token
// (anyone who once read a delivery's headers, or GitLab's webhook logs) can send any
// body, with any headers, at any time. No header, no body and no time is signed.
//
// The comparison is constant-time: the SHA-256 digests of the header value and of each
// active secret are compared with crypto/subtle.ConstantTimeCompare, equal-length
// values, so neither the token's content nor its length shortens the comparison, and
// every active secret is compared. The Keyring is used for what it shares with every
// provider: decoding and checking the secrets, and judging which are active.
//
// GitLab's newer signing token signs `{webhook-id}.{webhook-timestamp}.{body}` with
// HMAC-SHA256 and sends webhook-id, webhook-timestamp and webhook-signature (the
// Standard Webhooks scheme); a webhook configured with one is received with type
// StandardWebhooks, which binds the body, the id and the time.
type gitlabVerifier struct {
	// all holds every secret: it decides whether any is active at all.
	all *signature.Keyring
	// tokens holds each secret on its own, for its expiry, with its digest.
	tokens []gitlabToken
}

type gitlabToken struct {
	keys   *signature.Keyring
	digest [sha256.Size]byte
}

func newGitLabVerifier(secrets []signature.Secret) (signature.Verifier, error) {
	all, err := signature.NewHMACKeyring(sha256.New, v1alpha1.KeyRaw, secrets)
	if err != nil {
		return nil, err
	}
	v := &gitlabVerifier{all: all, tokens: make([]gitlabToken, 0, len(secrets))}
	for _, s := range secrets {
		keys, err := signature.NewHMACKeyring(sha256.New, v1alpha1.KeyRaw, []signature.Secret{s})
		if err != nil {
			return nil, err // not reached: all decoded the same secrets
		}
		v.tokens = append(v.tokens, gitlabToken{keys: keys, digest: sha256.Sum256([]byte(s.Value))})
	}
	return verifierOf{v}, nil
}

func init() {
	register(Provider{
		Type: ProviderGitLab,
		Verifier: func(_ v1alpha1.ProviderSpec, secrets []signature.Secret, _ time.Duration) (signature.Verifier, error) {
			return newGitLabVerifier(secrets)
		},
		BodyUnsigned: true,
		Preset: Preset{
			// X-Gitlab-Event-UUID and Idempotency-Key are unsigned headers. The digest of the
			// body dedupes a redelivery (the same body) and a replay of a captured body
			// under any headers; it cannot stop a token holder from sending new bodies.
			ID: `signed.digest`,
			// Project and group hooks name the event in object_kind; system hooks that have
			// none name it in event_name.
			Type: `has(body.object_kind) ? body.object_kind + ` +
				`(has(body.object_attributes) && has(body.object_attributes.action) && type(body.object_attributes.action) == string ? ` +
				`"." + body.object_attributes.action : "") : ` +
				`body.event_name`,
			EntityKey: `has(body.object_attributes) && has(body.object_attributes.url) ? body.object_attributes.url : ` +
				`body.project.path_with_namespace`,
		},
		Sign:   gitlabSigner,
		Sample: gitlabSample,
		Doc: Doc{
			Scheme: "the secret token itself in `X-Gitlab-Token` (compared in constant time; not a signature)",
			Signed: "nothing: the token authenticates the sender but binds neither body nor time, so anyone holding a captured token can send any body",
			Key:    "the webhook's secret token (raw)",
		},
	})
}

// Open compares the token with every active secret and returns the body as the document.
func (v *gitlabVerifier) Open(req signature.Request) (*signature.Verified, error) {
	if _, ferr := v.all.Active(req.Now); ferr != nil {
		return nil, ferr
	}
	value, ferr := signature.SingleHeader(req.Header, HeaderGitLabToken)
	if ferr != nil {
		return nil, ferr
	}
	got := sha256.Sum256([]byte(value))
	match := 0
	for _, t := range v.tokens {
		if _, inactive := t.keys.Active(req.Now); inactive != nil {
			continue
		}
		match |= subtle.ConstantTimeCompare(got[:], t.digest[:])
	}
	if match != 1 {
		return nil, signature.Fail(signature.ReasonMismatch, "the token in %s is not an active secret", HeaderGitLabToken)
	}
	return signature.WholeBody(req, nil), nil
}

// gitlabSample is an event of object_kind e.Type in the project the entity key names.
func gitlabSample(e SampleEvent) (Delivery, error) {
	return jsonDelivery(map[string]any{
		"object_kind": e.Type,
		"project":     map[string]any{"path_with_namespace": e.EntityKey},
		testIDField:   e.ID,
	}, "X-Gitlab-Event", "System Hook")
}

// gitlabSigner sends the token itself, as GitLab does.
func gitlabSigner(_ v1alpha1.ProviderSpec, secret string, d Delivery) (Delivery, error) {
	if _, err := signature.NewHMACSigningKey(sha256.New, v1alpha1.KeyRaw, secret); err != nil {
		return Delivery{}, fmt.Errorf("signing secret: %w", err)
	}
	d.Header.Set(HeaderGitLabToken, secret)
	return d, nil
}
