package provider

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// Standard Webhooks headers, and the svix-* names that Svix sends for the same scheme.
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
)

var standardWebhooksHeaders = []signature.HeaderSet{
	{Signature: HeaderWebhookSignature, Timestamp: HeaderWebhookTimestamp, ID: HeaderWebhookID},
	{Signature: "svix-signature", Timestamp: "svix-timestamp", ID: "svix-id"},
}

// standardWebhooksVerifier verifies the Standard Webhooks scheme (also what Svix, and so
// Clerk and Resend, send): `{id}.{timestamp}.{body}`, space-separated signatures of
// several versions. `whsec_` secrets verify the symmetric `v1,` entries with
// HMAC-SHA256; `whpk_` public keys verify the asymmetric `v1a,` entries with Ed25519.
func standardWebhooksVerifier(secrets []signature.Secret, tolerance time.Duration) (signature.Verifier, error) {
	var symmetric, asymmetric []signature.Secret
	for _, s := range secrets {
		if strings.HasPrefix(s.Value, "whpk_") {
			asymmetric = append(asymmetric, s)
		} else {
			symmetric = append(symmetric, s)
		}
	}
	var verifiers []signature.Verifier
	for _, kind := range []struct {
		secrets []signature.Secret
		keyring func([]signature.Secret) (*signature.Keyring, error)
		prefix  string
	}{
		{symmetric, func(s []signature.Secret) (*signature.Keyring, error) {
			return signature.NewHMACKeyring(sha256.New, v1alpha1.KeyWhsec, s)
		}, "v1,"},
		{asymmetric, func(s []signature.Secret) (*signature.Keyring, error) {
			return signature.NewEd25519Keyring(v1alpha1.PublicKeyWhpk, s)
		}, "v1a,"},
	} {
		if len(kind.secrets) == 0 {
			continue
		}
		keys, err := kind.keyring(kind.secrets)
		if err != nil {
			return nil, err
		}
		v, err := signature.NewSchemeVerifier(standardWebhooksScheme(kind.prefix), keys, tolerance)
		if err != nil {
			return nil, err
		}
		verifiers = append(verifiers, v)
	}
	if len(verifiers) == 0 {
		return nil, signature.ErrNoSecrets
	}
	if len(verifiers) == 1 {
		return verifiers[0], nil
	}
	return signature.AnyOf(verifiers...), nil
}

// svixDelivered completes p, a provider whose webhooks Svix delivers (Clerk, Resend): it
// is verified exactly as type StandardWebhooks is (either header set, one set whole) and
// signed under the svix-* header names. Its id preset is the signed svix-id, which stays
// the same when Svix retries a message, and its doc describes Svix's scheme; its other
// presets, sample, key and source are its own.
func svixDelivered(p Provider) Provider {
	p.Verifier = func(_ v1alpha1.ProviderSpec, secrets []signature.Secret, tolerance time.Duration) (signature.Verifier, error) {
		return standardWebhooksVerifier(secrets, tolerance)
	}
	p.Sign = standardWebhooksSigner("svix-id")
	p.Preset.ID = `signed.id`
	p.Doc.Scheme = "HMAC-SHA256 base64 in `svix-signature: v1,…` (Standard Webhooks via Svix)"
	p.Doc.Signed = "`svix-id`, `svix-timestamp` and the body (or the `webhook-*` set)"
	p.Doc.Timestamp = "`svix-timestamp`"
	return p
}

// standardWebhooksScheme is the scheme for one signature version; entries of other
// versions lack its prefix and are skipped, as the specification asks.
func standardWebhooksScheme(prefix string) signature.Scheme {
	return signature.Scheme{
		HeaderSets: standardWebhooksHeaders,
		Prefix:     prefix,
		Separator:  " ",
		Encoding:   v1alpha1.EncodingBase64,
		Template:   signature.MustTemplate("{id}.{timestamp}.{body}"),
	}
}

func init() {
	register(Provider{
		Type: v1alpha1.ProviderStandardWebhooks,
		Verifier: func(_ v1alpha1.ProviderSpec, secrets []signature.Secret, tolerance time.Duration) (signature.Verifier, error) {
			return standardWebhooksVerifier(secrets, tolerance)
		},
		Preset: Preset{
			// The id of the header set that verified (webhook-id or svix-id): the other
			// set's id header is not signed.
			ID:         `signed.id`,
			Type:       `body.type`,
			EntityKey:  `body.data.id`,
			Amount:     `body.data.amount`,
			OccurredAt: `body.timestamp`,
		},
		Sign:   standardWebhooksSigner(HeaderWebhookID),
		Sample: standardWebhooksSample,
		Doc: Doc{
			Scheme:    "HMAC-SHA256 (`v1,`) or Ed25519 (`v1a,`) base64 in `webhook-signature` (or `svix-signature`)",
			Signed:    "`webhook-id`, `webhook-timestamp` and the body (or the `svix-*` set)",
			Timestamp: "`webhook-timestamp`",
			Key:       "`whsec_…` (HMAC) or `whpk_…` (an Ed25519 public key)",
			Source:    "[Standard Webhooks](#standard-webhooks)",
		},
	})
}

// standardWebhooksSample is an event whose webhook-id is the event id.
func standardWebhooksSample(e SampleEvent) (Delivery, error) {
	return signedIDDelivery(e.ID, map[string]any{
		"type": e.Type, "timestamp": rfc3339(e.Time), "data": map[string]any{"id": e.EntityKey},
	})
}

// standardWebhooksSigner signs `v1,` with a whsec_ secret, under the header set whose
// id header is idHeader (webhook-id, or svix-id for what Svix delivers). A whpk_
// secret is an Ed25519 public key: it verifies `v1a,` signatures but cannot make one.
func standardWebhooksSigner(idHeader string) func(v1alpha1.ProviderSpec, string, Delivery) (Delivery, error) {
	return func(spec v1alpha1.ProviderSpec, secret string, d Delivery) (Delivery, error) {
		if strings.HasPrefix(secret, "whpk_") {
			return Delivery{}, fmt.Errorf("%w: the signing secret is a whpk_ Ed25519 public key, which verifies but cannot sign; sign with the endpoint's whsec_ secret", ErrCannotSign)
		}
		s := standardWebhooksScheme("v1,")
		for _, set := range standardWebhooksHeaders {
			if set.ID == idHeader {
				s.HeaderSets = []signature.HeaderSet{set}
			}
		}
		return signWithScheme(s, sha256.New, v1alpha1.KeyWhsec, secret, d)
	}
}
