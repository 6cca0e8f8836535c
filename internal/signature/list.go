package signature

import (
	"crypto/sha1" //nolint:gosec // HMAC-SHA1 is still what some providers sign with; HMAC does not rely on SHA-1's collision resistance.
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strings"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// listScheme is the generic HMAC scheme: a header carrying one or more encoded
// signatures (each with an optional prefix), over content built from a template of the
// body, a timestamp header and an id header. The GitHub, Shopify, Slack and Standard
// Webhooks presets are values of this type, and so is every provider.type HMAC spec.
type listScheme struct {
	// headerSets are tried in order; the first whose signature header is present is
	// used whole, so headers of two sets are never mixed.
	headerSets []headerSet
	prefix     string
	separator  string
	encoding   v1alpha1.SignatureEncoding
	keyEnc     v1alpha1.KeyEncoding
	newHash    func() hash.Hash
	template   []segment
}

type headerSet struct {
	signature string
	timestamp string // empty when the scheme signs no timestamp
	id        string // empty when the scheme signs no id
}

// segmentKind is one piece of a signedContent template.
type segmentKind int

const (
	segLiteral segmentKind = iota
	segBody
	segTimestamp
	segID
)

type segment struct {
	kind    segmentKind
	literal []byte
}

func githubScheme() listScheme {
	return listScheme{
		headerSets: []headerSet{{signature: "X-Hub-Signature-256"}},
		prefix:     "sha256=",
		encoding:   v1alpha1.EncodingHex,
		keyEnc:     v1alpha1.KeyRaw,
		newHash:    sha256.New,
		template:   mustTemplate("{body}"),
	}
}

func shopifyScheme() listScheme {
	return listScheme{
		headerSets: []headerSet{{signature: "X-Shopify-Hmac-Sha256"}},
		encoding:   v1alpha1.EncodingBase64,
		keyEnc:     v1alpha1.KeyRaw,
		newHash:    sha256.New,
		template:   mustTemplate("{body}"),
	}
}

func slackScheme() listScheme {
	return listScheme{
		headerSets: []headerSet{{signature: "X-Slack-Signature", timestamp: "X-Slack-Request-Timestamp"}},
		prefix:     "v0=",
		encoding:   v1alpha1.EncodingHex,
		keyEnc:     v1alpha1.KeyRaw,
		newHash:    sha256.New,
		template:   mustTemplate("v0:{timestamp}:{body}"),
	}
}

// Standard Webhooks headers, and the svix-* names that Svix sends for the same scheme.
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
)

func standardWebhooksScheme() listScheme {
	return listScheme{
		headerSets: []headerSet{
			{signature: HeaderWebhookSignature, timestamp: HeaderWebhookTimestamp, id: HeaderWebhookID},
			{signature: "svix-signature", timestamp: "svix-timestamp", id: "svix-id"},
		},
		// Entries of other versions (v1a asymmetric, future v2) lack this prefix and are
		// skipped, as the specification asks.
		prefix:    "v1,",
		separator: " ",
		encoding:  v1alpha1.EncodingBase64,
		keyEnc:    v1alpha1.KeyWhsec,
		newHash:   sha256.New,
		template:  mustTemplate("{id}.{timestamp}.{body}"),
	}
}

// schemeFromHMACSpec validates a generic HMAC spec and fills in the CRD defaults, which
// are absent when the receiver reads a manifest file that was never admitted.
func schemeFromHMACSpec(spec v1alpha1.HMACSpec) (listScheme, error) {
	s := listScheme{prefix: spec.Prefix, separator: spec.Separator}
	if strings.TrimSpace(spec.Header) == "" {
		return s, errors.New("header is required")
	}
	for _, h := range []struct{ field, value string }{
		{"header", spec.Header}, {"timestampHeader", spec.TimestampHeader}, {"idHeader", spec.IDHeader},
	} {
		if h.value != "" && !validHeaderName(h.value) {
			return s, fmt.Errorf("%s %q is not a valid HTTP header name", h.field, h.value)
		}
	}
	switch spec.Algorithm {
	case v1alpha1.HMACSHA256, "":
		s.newHash = sha256.New
	case v1alpha1.HMACSHA1:
		s.newHash = sha1.New
	case v1alpha1.HMACSHA512:
		s.newHash = sha512.New
	default:
		return s, fmt.Errorf("algorithm %q is not one of SHA1, SHA256, SHA512", spec.Algorithm)
	}
	switch spec.Encoding {
	case v1alpha1.EncodingHex, "":
		s.encoding = v1alpha1.EncodingHex
	case v1alpha1.EncodingBase64:
		s.encoding = v1alpha1.EncodingBase64
	default:
		return s, fmt.Errorf("encoding %q is not one of Hex, Base64", spec.Encoding)
	}
	switch spec.KeyEncoding {
	case v1alpha1.KeyRaw, "":
		s.keyEnc = v1alpha1.KeyRaw
	case v1alpha1.KeyBase64, v1alpha1.KeyHex, v1alpha1.KeyWhsec:
		s.keyEnc = spec.KeyEncoding
	default:
		return s, fmt.Errorf("keyEncoding %q is not one of Raw, Base64, Hex, Whsec", spec.KeyEncoding)
	}
	content := spec.SignedContent
	if content == "" {
		content = "{body}"
	}
	template, err := parseTemplate(content)
	if err != nil {
		return s, fmt.Errorf("signedContent: %w", err)
	}
	s.template = template
	usesTimestamp, usesID := templateUses(template, segTimestamp), templateUses(template, segID)
	switch {
	case usesTimestamp && spec.TimestampHeader == "":
		return s, errors.New("signedContent uses {timestamp} but timestampHeader is not set")
	case !usesTimestamp && spec.TimestampHeader != "":
		// A timestamp outside the signed content could be replaced by anyone, which would
		// make the tolerance check a false comfort.
		return s, errors.New("timestampHeader is set but signedContent does not include {timestamp}, so the timestamp would not be authenticated")
	case usesID && spec.IDHeader == "":
		return s, errors.New("signedContent uses {id} but idHeader is not set")
	case !usesID && spec.IDHeader != "":
		return s, errors.New("idHeader is set but signedContent does not include {id}")
	}
	s.headerSets = []headerSet{{signature: spec.Header, timestamp: spec.TimestampHeader, id: spec.IDHeader}}
	return s, nil
}

func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !isLetter(c) && !isDigit(c) && strings.IndexByte("!#$%&'*+-.^_`|~", c) < 0 {
			return false
		}
	}
	return true
}

// parseTemplate splits a signedContent template into literals and the placeholders
// {body}, {timestamp} and {id}. It must contain {body}: a signature that does not cover
// the body authenticates nothing the receiver acts on.
func parseTemplate(t string) ([]segment, error) {
	placeholders := map[string]segmentKind{"{body}": segBody, "{timestamp}": segTimestamp, "{id}": segID}
	var (
		segments []segment
		literal  []byte
	)
	for i := 0; i < len(t); {
		if t[i] == '{' {
			end := strings.IndexByte(t[i:], '}')
			if end > 0 {
				name := t[i : i+end+1]
				if kind, ok := placeholders[name]; ok {
					if len(literal) > 0 {
						segments = append(segments, segment{kind: segLiteral, literal: literal})
						literal = nil
					}
					segments = append(segments, segment{kind: kind})
					i += end + 1
					continue
				}
				if isPlaceholderName(name[1 : len(name)-1]) {
					return nil, fmt.Errorf("unknown placeholder %s; use {body}, {timestamp} or {id}", name)
				}
			}
		}
		literal = append(literal, t[i])
		i++
	}
	if len(literal) > 0 {
		segments = append(segments, segment{kind: segLiteral, literal: literal})
	}
	if !templateUses(segments, segBody) {
		return nil, errors.New("it must include {body}")
	}
	return segments, nil
}

func isPlaceholderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isLetter(c) && c != '_' {
			return false
		}
	}
	return true
}

func templateUses(segments []segment, kind segmentKind) bool {
	for _, s := range segments {
		if s.kind == kind {
			return true
		}
	}
	return false
}

func mustTemplate(t string) []segment {
	segments, err := parseTemplate(t)
	if err != nil {
		panic(fmt.Sprintf("preset template %q: %v", t, err))
	}
	return segments
}

// parseSignatureList splits a signature header into decoded candidate MACs. Entries
// without the prefix, that do not decode, or that have the wrong length are skipped: a
// header may list signatures of other versions or algorithms next to ours.
func parseSignatureList(value, prefix, separator string, encoding v1alpha1.SignatureEncoding, size int) [][]byte {
	entries := []string{value}
	if separator != "" {
		entries = strings.Split(value, separator)
	}
	var candidates [][]byte
	for _, entry := range entries {
		entry = strings.TrimSpace(entry)
		encoded, ok := strings.CutPrefix(entry, prefix)
		if !ok || encoded == "" {
			continue
		}
		decoded, ok := decodeSignature(encoding, encoded, size)
		if !ok {
			continue
		}
		candidates = append(candidates, decoded)
	}
	return candidates
}

type listVerifier struct {
	scheme    listScheme
	core      *hmacCore
	tolerance time.Duration
}

func newListVerifier(scheme listScheme, tolerance time.Duration, secrets []Secret) (*listVerifier, error) {
	core, err := newCore(scheme.newHash, scheme.keyEnc, secrets)
	if err != nil {
		return nil, err
	}
	return &listVerifier{scheme: scheme, core: core, tolerance: tolerance}, nil
}

func (v *listVerifier) Verify(req Request) error {
	_, err := v.Open(req)
	return err
}

func (v *listVerifier) Open(req Request) (*Verified, error) {
	keys, ferr := v.core.active(req.Now)
	if ferr != nil {
		return nil, ferr
	}
	set := v.scheme.headerSets[0]
	for _, candidate := range v.scheme.headerSets {
		if present(req.Header, candidate.signature) {
			set = candidate
			break
		}
	}
	sigValue, ferr := singleHeader(req.Header, set.signature)
	if ferr != nil {
		return nil, ferr
	}
	var timestamp, id string
	if set.timestamp != "" {
		if timestamp, ferr = singleHeader(req.Header, set.timestamp); ferr != nil {
			return nil, ferr
		}
	}
	if set.id != "" {
		if id, ferr = singleHeader(req.Header, set.id); ferr != nil {
			return nil, ferr
		}
	}
	candidates := parseSignatureList(sigValue, v.scheme.prefix, v.scheme.separator, v.scheme.encoding, v.core.macSize())
	if len(candidates) == 0 {
		return nil, fail(ReasonMalformedHeader, "header %s carries no signature of the expected form", http.CanonicalHeaderKey(set.signature))
	}
	if set.timestamp != "" {
		if ferr := checkTimestamp(http.CanonicalHeaderKey(set.timestamp), timestamp, req.Now, v.tolerance); ferr != nil {
			return nil, ferr
		}
	}
	parts := make([][]byte, len(v.scheme.template))
	for i, s := range v.scheme.template {
		switch s.kind {
		case segLiteral:
			parts[i] = s.literal
		case segBody:
			parts[i] = req.Body
		case segTimestamp:
			parts[i] = []byte(timestamp)
		case segID:
			parts[i] = []byte(id)
		}
	}
	if !v.core.match(keys, candidates, parts...) {
		return nil, fail(ReasonMismatch, "no active secret produces a signature in %s", http.CanonicalHeaderKey(set.signature))
	}
	signed := map[string]string{}
	if set.timestamp != "" {
		signed[SignedTimestamp] = timestamp
	}
	if set.id != "" {
		signed[SignedID] = id
	}
	return wholeBody(req, signed), nil
}

// SignStandardWebhooks returns the webhook-signature value ("v1,<base64>") of a message
// signed with a decoded Standard Webhooks key (see DecodeWhsec).
func SignStandardWebhooks(key []byte, id string, ts time.Time, body []byte) string {
	core := hmacCore{newHash: sha256.New}
	timestamp := fmt.Sprintf("%d", ts.Unix())
	mac := core.mac(key, []byte(id), []byte("."), []byte(timestamp), []byte("."), body)
	return "v1," + base64.StdEncoding.EncodeToString(mac)
}
