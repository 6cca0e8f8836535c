package signature

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// Scheme is the generic signature scheme: a header carrying one or more encoded
// signatures over content built from a template of the body, a signed timestamp, a
// signed id, the method and the URL. Most providers are values of this type
// (internal/provider), and so is every provider.type HMAC or Ed25519 spec.
type Scheme struct {
	// HeaderSets are tried in order; the first whose signature header is present is
	// used whole, so headers of two sets are never mixed.
	HeaderSets []HeaderSet
	// Prefix is stripped from each signature of a list header ("sha256=", "v1,");
	// entries without it are skipped. Not used with Composite.
	Prefix string
	// Separator splits a list header carrying several signatures; empty means one.
	Separator string
	// Composite, when set, reads the signature header as key/value pairs carrying the
	// timestamp and the signatures (`t=...,v1=...`).
	Composite *Composite
	// Encoding of each signature.
	Encoding v1alpha1.SignatureEncoding
	// TimestampFormat is how the signed timestamp is written.
	TimestampFormat v1alpha1.TimestampFormat
	// Template is the signed content.
	Template Template
	// URL is what {url} stands for: the URL the provider sends to, as configured there.
	URL string
}

// HeaderSet names the headers of one form of a scheme.
type HeaderSet struct {
	Signature string
	Timestamp string // empty when the timestamp is not a header of its own
	ID        string // empty when the scheme signs no id
}

// Composite describes a signature header of key/value pairs.
type Composite struct {
	PairSeparator, KeyValueSeparator string
	// TimestampKey is the key of the one timestamp pair; empty when there is none.
	TimestampKey string
	// SignatureKey is the key of the signature pairs; there may be several.
	SignatureKey string
}

// Placeholders of a signed-content template.
const (
	PlaceholderBody      = "{body}"
	PlaceholderTimestamp = "{timestamp}"
	PlaceholderID        = "{id}"
	PlaceholderMethod    = "{method}"
	PlaceholderURL       = "{url}"
)

var placeholders = []string{PlaceholderBody, PlaceholderTimestamp, PlaceholderID, PlaceholderMethod, PlaceholderURL}

// Template is a parsed signed-content template: literals and placeholders.
type Template []segment

type segment struct {
	placeholder string // empty for a literal
	literal     []byte
}

// ParseTemplate splits a signed-content template into literals and placeholders. It
// must contain {body} exactly once: a signature that does not cover the body
// authenticates nothing the receiver acts on.
func ParseTemplate(t string) (Template, error) {
	var (
		out     Template
		literal []byte
	)
	for i := 0; i < len(t); {
		if t[i] == '{' {
			if end := strings.IndexByte(t[i:], '}'); end > 0 {
				name := t[i : i+end+1]
				if known(name) {
					if len(literal) > 0 {
						out = append(out, segment{literal: literal})
						literal = nil
					}
					out = append(out, segment{placeholder: name})
					i += end + 1
					continue
				}
				if isPlaceholderName(name[1 : len(name)-1]) {
					return nil, fmt.Errorf("unknown placeholder %s; use %s", name, strings.Join(placeholders, ", "))
				}
			}
		}
		literal = append(literal, t[i])
		i++
	}
	if len(literal) > 0 {
		out = append(out, segment{literal: literal})
	}
	switch n := out.count(PlaceholderBody); {
	case n == 0:
		return nil, errors.New("it must include {body}")
	case n > 1:
		return nil, errors.New("{body} may appear once")
	}
	return out, nil
}

// MustTemplate parses a provider's fixed template.
func MustTemplate(t string) Template {
	tmpl, err := ParseTemplate(t)
	if err != nil {
		panic(fmt.Sprintf("template %q: %v", t, err))
	}
	return tmpl
}

// String returns the template text.
func (t Template) String() string {
	var b strings.Builder
	for _, s := range t {
		if s.placeholder != "" {
			b.WriteString(s.placeholder)
		} else {
			b.Write(s.literal)
		}
	}
	return b.String()
}

// Uses reports whether the template contains placeholder.
func (t Template) Uses(placeholder string) bool { return t.count(placeholder) > 0 }

func (t Template) count(placeholder string) int {
	n := 0
	for _, s := range t {
		if s.placeholder == placeholder {
			n++
		}
	}
	return n
}

func known(name string) bool {
	for _, p := range placeholders {
		if p == name {
			return true
		}
	}
	return false
}

// signedValues are what a template's placeholders stand for in one request.
type signedValues struct {
	body                       []byte
	timestamp, id, method, url string
}

// expand returns the signed content of t for values, one part per segment, in order:
// what the MAC is computed over, when verifying and when signing alike.
func (t Template) expand(values signedValues) [][]byte {
	parts := make([][]byte, len(t))
	for i, seg := range t {
		switch seg.placeholder {
		case "":
			parts[i] = seg.literal
		case PlaceholderBody:
			parts[i] = values.body
		case PlaceholderTimestamp:
			parts[i] = []byte(values.timestamp)
		case PlaceholderID:
			parts[i] = []byte(values.id)
		case PlaceholderMethod:
			parts[i] = []byte(values.method)
		case PlaceholderURL:
			parts[i] = []byte(values.url)
		}
	}
	return parts
}

func isPlaceholderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isLetter(c) && c != '_' {
			return false
		}
	}
	return true
}

// Check returns an error when the scheme cannot work: a placeholder without its
// source, or a timestamp or id that the content would not sign.
func (s Scheme) Check() error {
	if len(s.HeaderSets) == 0 || len(s.Template) == 0 {
		return errors.New("the scheme has no header or no template")
	}
	if c := s.Composite; c != nil && (c.PairSeparator == "" || c.KeyValueSeparator == "" || c.SignatureKey == "") {
		return errors.New("a composite header needs a pair separator, a key/value separator and a signature key")
	}
	for _, set := range s.HeaderSets {
		hasTimestamp := set.Timestamp != "" || (s.Composite != nil && s.Composite.TimestampKey != "")
		switch {
		case s.Template.Uses(PlaceholderTimestamp) != hasTimestamp:
			return errors.New("the template must use {timestamp} exactly when the scheme has a timestamp")
		case s.Template.Uses(PlaceholderID) != (set.ID != ""):
			return errors.New("the template must use {id} exactly when the scheme has an id header")
		}
	}
	if s.Template.Uses(PlaceholderURL) && s.URL == "" {
		return errors.New("the template uses {url}, so provider.signedURL must be set")
	}
	return nil
}

// SchemeVerifier verifies requests signed with a Scheme. It is safe for concurrent use.
type SchemeVerifier struct {
	scheme    Scheme
	keys      *Keyring
	tolerance time.Duration
}

// NewSchemeVerifier checks the scheme and returns its verifier.
func NewSchemeVerifier(scheme Scheme, keys *Keyring, tolerance time.Duration) (*SchemeVerifier, error) {
	if err := scheme.Check(); err != nil {
		return nil, err
	}
	if tolerance <= 0 {
		return nil, fmt.Errorf("the tolerance must be positive, got %s", tolerance)
	}
	return &SchemeVerifier{scheme: scheme, keys: keys, tolerance: tolerance}, nil
}

// Verify returns nil when the request verifies, else an *Error.
func (v *SchemeVerifier) Verify(req Request) error {
	_, err := v.Open(req)
	return err
}

// Open verifies the request and returns its signed document and values.
func (v *SchemeVerifier) Open(req Request) (*Verified, error) {
	keys, ferr := v.keys.Active(req.Now)
	if ferr != nil {
		return nil, ferr
	}
	set := v.scheme.HeaderSets[0]
	for _, candidate := range v.scheme.HeaderSets {
		if Present(req.Header, candidate.Signature) {
			set = candidate
			break
		}
	}
	sigValue, ferr := SingleHeader(req.Header, set.Signature)
	if ferr != nil {
		return nil, ferr
	}
	name := http.CanonicalHeaderKey(set.Signature)
	var (
		candidates [][]byte
		timestamp  string
		tsName     string
	)
	if c := v.scheme.Composite; c != nil {
		if candidates, timestamp, ferr = v.parseComposite(name, sigValue); ferr != nil {
			return nil, ferr
		}
		if c.TimestampKey != "" {
			tsName = name + " " + c.TimestampKey
		}
	} else {
		if candidates, ferr = v.parseList(name, sigValue); ferr != nil {
			return nil, ferr
		}
		if set.Timestamp != "" {
			if timestamp, ferr = SingleHeader(req.Header, set.Timestamp); ferr != nil {
				return nil, ferr
			}
			tsName = http.CanonicalHeaderKey(set.Timestamp)
		}
	}
	var id string
	if set.ID != "" {
		if id, ferr = SingleHeader(req.Header, set.ID); ferr != nil {
			return nil, ferr
		}
	}
	if len(candidates) == 0 {
		return nil, Fail(ReasonMalformedHeader, "header %s carries no signature of the expected form", name)
	}
	signed := map[string]string{}
	if tsName != "" {
		unix, ferr := CheckTimestamp(tsName, v.scheme.TimestampFormat, timestamp, req.Now, v.tolerance)
		if ferr != nil {
			return nil, ferr
		}
		signed[SignedTimestamp] = unix
	}
	if set.ID != "" {
		signed[SignedID] = id
	}
	parts := v.scheme.Template.expand(signedValues{body: req.Body, timestamp: timestamp, id: id, method: req.Method, url: v.scheme.URL})
	key, ok := v.keys.Match(keys, candidates, parts...)
	if !ok {
		return nil, Fail(ReasonMismatch, "no active secret produces a signature in %s", name)
	}
	verified := WholeBody(req, signed)
	verified.keys, verified.key = v.keys, key
	return verified, nil
}

// MaxSignatures is the most signatures of our form one header may list. Senders list
// one per active secret, a few during a rotation; every candidate is checked against
// every active key, and for Ed25519 each check hashes the whole body again, so an
// unauthenticated header of hundreds of made-up signatures would cost seconds of CPU.
// A header that lists more is refused as malformed, never truncated (the genuine
// signature may come last).
const MaxSignatures = 8

// tooManySignatures is the refusal of a header that lists more than MaxSignatures.
func tooManySignatures(name string) *Error {
	return Fail(ReasonMalformedHeader, "%s lists more than %d signatures", name, MaxSignatures)
}

// parseList splits a list header into decoded candidates. Entries without the prefix,
// that do not decode, or that have the wrong length are skipped: a header may list
// signatures of other versions or algorithms next to ours.
func (v *SchemeVerifier) parseList(name, value string) ([][]byte, *Error) {
	entries := []string{value}
	if v.scheme.Separator != "" {
		entries = strings.Split(value, v.scheme.Separator)
	}
	var candidates [][]byte
	for _, entry := range entries {
		encoded, ok := strings.CutPrefix(strings.TrimSpace(entry), v.scheme.Prefix)
		if !ok {
			continue
		}
		if decoded, ok := DecodeSignature(v.scheme.Encoding, encoded, v.keys.SignatureSize()); ok {
			if len(candidates) == MaxSignatures {
				return nil, tooManySignatures(name)
			}
			candidates = append(candidates, decoded)
		}
	}
	return candidates, nil
}

// parseComposite reads key/value pairs. The timestamp pair, when the scheme has one,
// must appear exactly once; signature values that do not decode are skipped (a
// provider may add schemes, and a roll lists one signature per secret); other keys are
// ignored. A pair without the key/value separator is malformed.
func (v *SchemeVerifier) parseComposite(name, value string) ([][]byte, string, *Error) {
	c := v.scheme.Composite
	var (
		candidates [][]byte
		timestamp  string
		seen       bool
	)
	for _, pair := range strings.Split(value, c.PairSeparator) {
		key, val, ok := strings.Cut(strings.TrimSpace(pair), c.KeyValueSeparator)
		if !ok {
			return nil, "", Fail(ReasonMalformedHeader, "%s has an element that is not key%svalue", name, c.KeyValueSeparator)
		}
		switch {
		case c.TimestampKey != "" && key == c.TimestampKey:
			if seen {
				return nil, "", Fail(ReasonMalformedHeader, "%s has more than one %s", name, c.TimestampKey)
			}
			seen, timestamp = true, val
		case key == c.SignatureKey:
			if sig, ok := DecodeSignature(v.scheme.Encoding, val, v.keys.SignatureSize()); ok {
				if len(candidates) == MaxSignatures {
					return nil, "", tooManySignatures(name)
				}
				candidates = append(candidates, sig)
			}
		}
	}
	if c.TimestampKey != "" && !seen {
		return nil, "", Fail(ReasonMalformedHeader, "%s has no %s", name, c.TimestampKey)
	}
	if len(candidates) == 0 {
		return nil, "", Fail(ReasonMalformedHeader, "%s has no %s signature of the expected form", name, c.SignatureKey)
	}
	return candidates, timestamp, nil
}

// AnyOf verifies with the first verifier that accepts the request. When every one
// refuses, the error of the one that came furthest (a mismatch before a bad timestamp,
// before a malformed or missing header) is returned. Standard Webhooks uses it for its
// HMAC (v1) and Ed25519 (v1a) keys.
func AnyOf(verifiers ...Verifier) Verifier { return anyOf(verifiers) }

type anyOf []Verifier

func (a anyOf) Verify(req Request) error {
	_, err := a.Open(req)
	return err
}

func (a anyOf) Open(req Request) (*Verified, error) {
	var best error
	for _, v := range a {
		verified, err := v.Open(req)
		if err == nil {
			return verified, nil
		}
		if best == nil || progress(ReasonOf(err)) > progress(ReasonOf(best)) {
			best = err
		}
	}
	if best == nil {
		return nil, ErrNoSecrets
	}
	return nil, best
}

func progress(r Reason) int {
	switch r {
	case ReasonMismatch:
		return 4
	case ReasonTimestampOutOfTolerance:
		return 3
	case ReasonMalformedHeader:
		return 2
	case ReasonMissingHeader:
		return 1
	}
	return 0
}
