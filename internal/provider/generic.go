package provider

import (
	"crypto/sha1" //nolint:gosec // HMAC-SHA1 is still what some providers sign with; HMAC does not rely on SHA-1's collision resistance.
	"crypto/sha256"
	"crypto/sha512"
	"hash"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/expr"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// The generic schemes (provider.type HMAC and Ed25519) describe a scheme field by field
// in spec.provider.hmac or spec.provider.ed25519. Both share v1alpha1.SchemeSpec: where
// the signature is and what it covers. This file turns one into a signature.Scheme and
// is the one place its rules are checked in Go; the CRD checks the same rules with the
// same words (TestCRDRulesMatchGo).

// hashes are the HMAC hash functions by name.
var hashes = map[v1alpha1.HMACAlgorithm]func() hash.Hash{
	v1alpha1.HMACSHA1:   sha1.New,
	v1alpha1.HMACSHA256: sha256.New,
	v1alpha1.HMACSHA512: sha512.New,
}

// schemeFromSpec checks a generic scheme spec (defaulted) and builds its scheme. field
// is "spec.provider.hmac" or "spec.provider.ed25519".
func schemeFromSpec(field string, s v1alpha1.SchemeSpec, signedURL string) (signature.Scheme, []error) {
	s.Default()
	var errs []error
	bad := func(f, format string, args ...any) { errs = append(errs, expr.Errorf(field+"."+f, format, args...)) }
	for _, h := range []struct{ field, value string }{
		{"header", s.Header}, {"timestampHeader", s.TimestampHeader}, {"idHeader", s.IDHeader},
	} {
		if (h.field == "header" || h.value != "") && !signature.ValidHeaderName(h.value) {
			bad(h.field, "%q is not a valid HTTP header name", h.value)
		}
	}
	switch s.Encoding {
	case v1alpha1.EncodingHex, v1alpha1.EncodingBase64:
	default:
		bad("encoding", "unknown encoding %q (Hex or Base64)", s.Encoding)
	}
	switch s.TimestampFormat {
	case v1alpha1.TimestampUnix, v1alpha1.TimestampUnixMilli, v1alpha1.TimestampRFC3339:
	default:
		bad("timestampFormat", "unknown timestamp format %q (Unix, UnixMilli or RFC3339)", s.TimestampFormat)
	}
	scheme := signature.Scheme{
		HeaderSets:      []signature.HeaderSet{{Signature: s.Header, Timestamp: s.TimestampHeader, ID: s.IDHeader}},
		Prefix:          s.Prefix,
		Separator:       s.Separator,
		Encoding:        s.Encoding,
		TimestampFormat: s.TimestampFormat,
		URL:             signedURL,
	}
	hasTimestamp := s.TimestampHeader != ""
	if c := s.Composite; c != nil {
		if s.Prefix != "" || s.Separator != "" || s.TimestampHeader != "" {
			bad("composite", "prefix, separator and timestampHeader do not apply with composite: the composite keys name the signatures and the timestamp")
		}
		if c.SignatureKey == "" {
			bad("composite.signatureKey", "is required")
		}
		scheme.Composite = &signature.Composite{
			PairSeparator: c.PairSeparator, KeyValueSeparator: c.KeyValueSeparator,
			TimestampKey: c.TimestampKey, SignatureKey: c.SignatureKey,
		}
		scheme.HeaderSets[0].Timestamp = ""
		hasTimestamp = c.TimestampKey != ""
	}
	tmpl, err := signature.ParseTemplate(s.SignedContent)
	if err != nil {
		bad("signedContent", "%v", err)
		return scheme, errs
	}
	scheme.Template = tmpl
	switch uses := tmpl.Uses(signature.PlaceholderTimestamp); {
	case uses && !hasTimestamp:
		bad("signedContent", "signedContent uses {timestamp}: set timestampHeader (or composite.timestampKey)")
	case !uses && hasTimestamp:
		// A timestamp outside the signed content could be replaced by anyone, which
		// would make the tolerance check a false comfort.
		bad("signedContent", "timestampHeader (or composite.timestampKey) is set but signedContent does not use {timestamp}, so the timestamp would not be authenticated")
	}
	if tmpl.Uses(signature.PlaceholderID) != (s.IDHeader != "") {
		bad("idHeader", "idHeader must be set exactly when signedContent uses {id}")
	}
	if tmpl.Uses(signature.PlaceholderURL) && signedURL == "" {
		errs = append(errs, expr.Errorf("spec.provider.signedURL", "is required when signedContent uses {url}"))
	}
	return scheme, errs
}

func validateHMAC(spec v1alpha1.ProviderSpec) []error {
	_, errs := hmacScheme(spec)
	return errs
}

func validateEd25519(spec v1alpha1.ProviderSpec) []error {
	_, errs := schemeFromSpec("spec.provider.ed25519", spec.Ed25519.SchemeSpec, spec.SignedURL)
	if e := spec.Ed25519.KeyEncoding; e != "" && e != v1alpha1.PublicKeyHex && e != v1alpha1.PublicKeyBase64 && e != v1alpha1.PublicKeyWhpk {
		errs = append(errs, expr.Errorf("spec.provider.ed25519.keyEncoding", "unknown key encoding %q (Hex, Base64 or Whpk)", e))
	}
	return errs
}

func hmacScheme(spec v1alpha1.ProviderSpec) (signature.Scheme, []error) {
	scheme, errs := schemeFromSpec("spec.provider.hmac", spec.HMAC.SchemeSpec, spec.SignedURL)
	if a := spec.HMAC.Algorithm; a != "" && hashes[a] == nil {
		errs = append(errs, expr.Errorf("spec.provider.hmac.algorithm", "unknown algorithm %q (SHA1, SHA256 or SHA512)", a))
	}
	switch spec.HMAC.KeyEncoding {
	case "", v1alpha1.KeyRaw, v1alpha1.KeyBase64, v1alpha1.KeyHex, v1alpha1.KeyWhsec:
	default:
		errs = append(errs, expr.Errorf("spec.provider.hmac.keyEncoding", "unknown key encoding %q (Raw, Base64, Hex or Whsec)", spec.HMAC.KeyEncoding))
	}
	return scheme, errs
}

// newSchemeVerifier is the Verifier of a provider that is a fixed HMAC scheme.
func newSchemeVerifier(scheme signature.Scheme, newHash func() hash.Hash, keyEncoding v1alpha1.KeyEncoding, secrets []signature.Secret, tolerance time.Duration) (signature.Verifier, error) {
	keys, err := signature.NewHMACKeyring(newHash, keyEncoding, secrets)
	if err != nil {
		return nil, err
	}
	return signature.NewSchemeVerifier(scheme, keys, tolerance)
}
