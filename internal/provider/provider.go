// Package provider holds everything hookkeeper knows about each webhook sender, one
// file per provider: how its requests are verified (a value of the shared
// signature.Scheme, or its own code over the shared signature.Keyring), the presets
// that read its events, the acknowledgement it expects, the endpoint-verification
// handshake it sends, what its signature covers (rendered into docs/providers.md
// by `make provider-docs`), and the sample event and signer `hookkeeper send-test`
// sends with (sign.go).
//
// Adding a provider touches its file here, its test data in testdata/, the
// ProviderType enum marker in api/v1alpha1, its sample in config/samples/providers/ and
// the generated table in docs/providers.md; nothing else.
package provider

import (
	"errors"
	"fmt"
	"hash"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/expr"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// Provider describes one sender.
type Provider struct {
	// Type is the spec.provider.type value.
	Type v1alpha1.ProviderType
	// Scheme is the provider's fixed scheme, HMAC under Hash with keys stored as
	// KeyEncoding (or Ed25519, see PublicKeyEncoding); {url} stands for
	// spec.provider.signedURL. Nil when the provider's Verifier is wholly its own code;
	// set next to a Verifier that wraps it (HubSpot), so tests and docs can read it.
	Scheme      *signature.Scheme
	Hash        func() hash.Hash
	KeyEncoding v1alpha1.KeyEncoding
	// PublicKeyEncoding, when set instead of Hash, makes Scheme an Ed25519 scheme whose
	// secrets are the provider's public keys stored in this encoding.
	PublicKeyEncoding v1alpha1.PublicKeyEncoding
	// Verifier builds the verifier of an endpoint from its provider spec (validated),
	// its secrets and the signed-timestamp tolerance (defaulted, positive). Set it for
	// a provider that is not one fixed Scheme; otherwise it is derived from Scheme.
	Verifier func(spec v1alpha1.ProviderSpec, secrets []signature.Secret, tolerance time.Duration) (signature.Verifier, error)
	// Preset are the default extraction expressions; spec.event overrides them field
	// by field.
	Preset Preset
	// Batch is true when one request carries several events (Adyen's notification
	// items, HubSpot's arrays); otherwise the verifier returns exactly one document.
	Batch bool
	// Ack is the answer to an accepted delivery; the zero value lets the receiver
	// answer a small JSON document that says whether it was a duplicate.
	Ack Response
	// Handshake answers a verified endpoint-verification request that carries no event
	// (ok true); nil when the provider sends none. It runs only after the signature
	// verified: an unverified challenge is never echoed.
	Handshake func(v *signature.Verified, header http.Header) (Response, bool)
	// NeedsURL is true when the scheme signs spec.provider.signedURL.
	NeedsURL bool
	// BodyUnsigned is true when what the provider sends does not bind the body (GitLab's
	// X-Gitlab-Token is the shared secret itself): a request with a changed body still
	// verifies. Doc.Signed must say so.
	BodyUnsigned bool
	// Refetch is true when spec.provider.refetch is supported.
	Refetch bool
	// Sign signs a delivery as the provider does, with a secret as its Secret stores it
	// (`hookkeeper send-test`; see the package function Sign). Set it for a provider
	// whose Verifier is its own code; a provider with an HMAC Scheme gets it from the
	// scheme. Nil when the Secret cannot sign: then CannotSign says why.
	Sign func(spec v1alpha1.ProviderSpec, secret string, d Delivery) (Delivery, error)
	// CannotSign says why the provider's requests cannot be signed with what its Secret
	// holds (an Ed25519 public key); empty when Sign is set.
	CannotSign string
	// Sample renders a sample event of the provider whose presets read e's id (or, for
	// a provider whose id is a digest of what it signs, an id unique to e.ID), type and
	// entity key. Required.
	Sample func(e SampleEvent) (Delivery, error)
	// Doc is what docs/providers.md says about the provider.
	Doc Doc
}

// Preset holds a provider's default extraction expressions. An empty expression means
// the field is absent by default.
type Preset struct {
	ID, Type, EntityKey, Amount, OccurredAt string
}

// Response is an answer the receiver sends as is.
type Response struct {
	Status      int
	ContentType string
	Body        []byte
}

// Doc is one row of the provider table in docs/providers.md.
type Doc struct {
	// Scheme is how requests are signed, e.g. "HMAC-SHA256 hex in X-Hub-Signature-256".
	Scheme string
	// Signed is what the signature covers.
	Signed string
	// Timestamp says which signed time bounds replays ("" when none is signed).
	Timestamp string
	// Handshake describes the endpoint verification, "" when there is none.
	Handshake string
	// Key says how the Secret stores the key.
	Key string
	// Source is where the scheme is documented; register makes it the provider's own
	// section of docs/providers.md, "## <Type>", when it is left empty.
	Source string
}

var registry = map[v1alpha1.ProviderType]*Provider{}

// register is called from each provider file's init.
func register(p Provider) {
	if _, dup := registry[p.Type]; dup {
		panic(fmt.Sprintf("provider %s registered twice", p.Type))
	}
	if p.Doc.Source == "" {
		p.Doc.Source = fmt.Sprintf("[%s](#%s)", p.Type, strings.ToLower(string(p.Type)))
	}
	if p.Scheme != nil && p.Scheme.Template.Uses(signature.PlaceholderURL) {
		p.NeedsURL = true
	}
	if p.Verifier == nil && p.Scheme != nil {
		p.Verifier = fixedSchemeVerifier(p)
	}
	if p.Sign == nil && p.CannotSign == "" && p.Scheme != nil {
		if p.Hash != nil {
			p.Sign = fixedSchemeSigner(p)
		} else {
			p.CannotSign = fmt.Sprintf("%s signs with its Ed25519 private key; the signing Secret holds its public key, which verifies but cannot sign", p.Type)
		}
	}
	if p.Verifier == nil || p.Preset.ID == "" || p.Preset.Type == "" || p.Doc.Scheme == "" || p.Doc.Signed == "" {
		panic(fmt.Sprintf("provider %s: a verifier, id and type presets, and its scheme and signed content for the docs are required", p.Type))
	}
	if (p.Sign == nil) == (p.CannotSign == "") || p.Sample == nil {
		panic(fmt.Sprintf("provider %s: a sample event, and a signer or the reason there is none, are required", p.Type))
	}
	registry[p.Type] = &p
}

// fixedSchemeVerifier is the Verifier of a provider that is one fixed Scheme.
func fixedSchemeVerifier(p Provider) func(v1alpha1.ProviderSpec, []signature.Secret, time.Duration) (signature.Verifier, error) {
	scheme := *p.Scheme
	probe := scheme
	probe.URL = "https://probe.invalid/"
	if err := probe.Check(); err != nil || (p.Hash == nil) == (p.PublicKeyEncoding == "") {
		panic(fmt.Sprintf("provider %s: the scheme needs exactly one of Hash and PublicKeyEncoding and must be consistent: %v", p.Type, err))
	}
	return func(spec v1alpha1.ProviderSpec, secrets []signature.Secret, tolerance time.Duration) (signature.Verifier, error) {
		s := scheme
		s.URL = spec.SignedURL
		var (
			keys *signature.Keyring
			err  error
		)
		if p.Hash != nil {
			keys, err = signature.NewHMACKeyring(p.Hash, p.KeyEncoding, secrets)
		} else {
			keys, err = signature.NewEd25519Keyring(p.PublicKeyEncoding, secrets)
		}
		if err != nil {
			return nil, err
		}
		return signature.NewSchemeVerifier(s, keys, tolerance)
	}
}

// Lookup returns the provider of a type.
func Lookup(t v1alpha1.ProviderType) (*Provider, bool) {
	p, ok := registry[t]
	return p, ok
}

// All returns every provider, sorted by type.
func All() []*Provider {
	out := make([]*Provider, 0, len(registry))
	for _, p := range registry {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *Provider) int {
		switch {
		case a.Type < b.Type:
			return -1
		case a.Type > b.Type:
			return 1
		}
		return 0
	})
	return out
}

// Tolerance is the endpoint's signed-timestamp tolerance.
func Tolerance(spec v1alpha1.ProviderSpec) time.Duration {
	if spec.Tolerance != nil {
		return spec.Tolerance.Duration
	}
	return v1alpha1.DefaultTolerance
}

// NewVerifier validates spec and builds its provider's verifier with the secrets. Key
// errors name the secret's index, never its value.
func NewVerifier(spec v1alpha1.ProviderSpec, secrets []signature.Secret) (signature.Verifier, error) {
	if err := errors.Join(Validate(spec)...); err != nil {
		return nil, err
	}
	p, _ := Lookup(spec.Type)
	return p.Verifier(spec, secrets, Tolerance(spec))
}

// Validate returns every problem of a provider spec, each naming its field: the CRD's
// rules again (for manifests that never went through an API server), and what only Go
// can check (header names, templates).
func Validate(spec v1alpha1.ProviderSpec) []error {
	var errs []error
	p, ok := Lookup(spec.Type)
	if !ok {
		return []error{expr.Errorf("spec.provider.type", "unknown provider %q", spec.Type)}
	}
	if spec.Tolerance != nil && spec.Tolerance.Duration <= 0 {
		errs = append(errs, expr.Errorf("spec.provider.tolerance", "must be positive, got %s", spec.Tolerance.Duration))
	}
	// The generic schemes: each block goes with its type and only with it.
	for _, g := range []struct {
		typ      v1alpha1.ProviderType
		field    string
		set      bool
		validate func(v1alpha1.ProviderSpec) []error
	}{
		{v1alpha1.ProviderHMAC, "hmac", spec.HMAC != nil, validateHMAC},
		{v1alpha1.ProviderEd25519, "ed25519", spec.Ed25519 != nil, validateEd25519},
	} {
		switch {
		case spec.Type == g.typ && !g.set:
			errs = append(errs, expr.Errorf("spec.provider."+g.field, "is required when provider.type is %s", g.typ))
		case spec.Type != g.typ && g.set:
			errs = append(errs, expr.Errorf("spec.provider."+g.field, "is only allowed when provider.type is %s", g.typ))
		case g.set:
			errs = append(errs, g.validate(spec)...)
		}
	}
	if p.NeedsURL && spec.SignedURL == "" {
		errs = append(errs, expr.Errorf("spec.provider.signedURL", "is required for provider.type %s, which signs the URL it sends to; set it to that URL exactly as configured at %s", spec.Type, spec.Type))
	}
	if spec.Refetch != nil && !p.Refetch {
		errs = append(errs, expr.Errorf("spec.provider.refetch", "is supported for provider.type Stripe only"))
	}
	return errs
}
