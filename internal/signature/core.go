package signature

import (
	"crypto/hmac"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// hmacCore is the one place that holds decoded keys, computes MACs and compares them.
// Every provider reduces a request to "these candidate signatures over these message
// parts" and hands that to verify, so the security-relevant code is written once.
type hmacCore struct {
	newHash func() hash.Hash
	keys    []hmacKey
}

type hmacKey struct {
	material  []byte
	expiresAt time.Time
}

func newCore(newHash func() hash.Hash, encoding v1alpha1.KeyEncoding, secrets []Secret) (*hmacCore, error) {
	if len(secrets) == 0 {
		return nil, ErrNoSecrets
	}
	core := &hmacCore{newHash: newHash, keys: make([]hmacKey, 0, len(secrets))}
	for i, s := range secrets {
		material, err := decodeKey(encoding, s.Value)
		if err != nil {
			// The index, never the value: this error reaches status conditions and logs.
			return nil, fmt.Errorf("signing secret %d: %w", i, err)
		}
		core.keys = append(core.keys, hmacKey{material: material, expiresAt: s.ExpiresAt})
	}
	return core, nil
}

// macSize is the length of one MAC, used to discard candidates that cannot match.
func (c *hmacCore) macSize() int { return c.newHash().Size() }

// active returns the keys that verify at now. A zero now returns none, so a caller that
// forgot to pass the clock cannot resurrect expired keys.
func (c *hmacCore) active(now time.Time) ([]hmacKey, *Error) {
	if now.IsZero() {
		return nil, fail(ReasonNoActiveSecret, "the request carries no time, so no secret can be judged active")
	}
	var keys []hmacKey
	for _, k := range c.keys {
		if k.expiresAt.IsZero() || now.Before(k.expiresAt) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, fail(ReasonNoActiveSecret, "all %d signing secrets have expired", len(c.keys))
	}
	return keys, nil
}

// mac computes the HMAC of the concatenation of parts, without copying the body.
func (c *hmacCore) mac(key []byte, parts ...[]byte) []byte {
	m := hmac.New(c.newHash, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// match reports whether any of keys signs parts with any of candidates. Comparisons are
// constant-time; it returns on the first match, which reveals only that a match exists.
func (c *hmacCore) match(keys []hmacKey, candidates [][]byte, parts ...[]byte) bool {
	for _, k := range keys {
		expected := c.mac(k.material, parts...)
		for _, candidate := range candidates {
			if hmac.Equal(expected, candidate) {
				return true
			}
		}
	}
	return false
}

// decodeKey turns a stored secret into HMAC key bytes. It rejects empty keys and
// surrounding whitespace: a trailing newline (the usual result of `kubectl create secret
// --from-file`) would otherwise silently become part of the key and fail every request.
func decodeKey(encoding v1alpha1.KeyEncoding, value string) ([]byte, error) {
	if value == "" {
		return nil, errors.New("the secret is empty")
	}
	if strings.TrimFunc(value, unicode.IsSpace) != value {
		return nil, errors.New("the secret has leading or trailing whitespace (often a newline from --from-file); store it without")
	}
	var (
		material []byte
		err      error
	)
	switch encoding {
	case v1alpha1.KeyRaw, "":
		material = []byte(value)
	case v1alpha1.KeyHex:
		material, err = hex.DecodeString(value)
		if err != nil {
			return nil, errors.New("the secret is not valid hex")
		}
	case v1alpha1.KeyBase64:
		material, err = base64.StdEncoding.DecodeString(value)
		if err != nil {
			return nil, errors.New("the secret is not valid base64")
		}
	case v1alpha1.KeyWhsec:
		material, err = DecodeWhsec(value)
		if err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unknown key encoding %q", encoding)
	}
	if len(material) == 0 {
		return nil, errors.New("the secret decodes to an empty key")
	}
	return material, nil
}

// DecodeWhsec decodes a Standard Webhooks key: base64 after an optional "whsec_" prefix.
// Errors never contain the key.
func DecodeWhsec(s string) ([]byte, error) {
	encoded := strings.TrimPrefix(s, "whsec_")
	if encoded == "" {
		return nil, errors.New("the whsec key is empty")
	}
	key, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		return nil, errors.New("the whsec key is not valid base64 after the whsec_ prefix")
	}
	if len(key) == 0 {
		return nil, errors.New("the whsec key decodes to an empty key")
	}
	return key, nil
}

// singleHeader returns the value of a header that must appear exactly once and be
// non-empty. Two values are ambiguous (which one was signed?), so they are malformed.
func singleHeader(h http.Header, name string) (string, *Error) {
	values := h.Values(name)
	switch {
	case len(values) == 0 || (len(values) == 1 && strings.TrimSpace(values[0]) == ""):
		return "", fail(ReasonMissingHeader, "header %s is missing or empty", http.CanonicalHeaderKey(name))
	case len(values) > 1:
		return "", fail(ReasonMalformedHeader, "header %s appears %d times", http.CanonicalHeaderKey(name), len(values))
	}
	return strings.TrimSpace(values[0]), nil
}

// present reports whether a header has a non-empty value.
func present(h http.Header, name string) bool {
	for _, v := range h.Values(name) {
		if strings.TrimSpace(v) != "" {
			return true
		}
	}
	return false
}

// parseUnixSeconds parses a signed timestamp: decimal digits only, no sign, no spaces, so
// the text that was signed and the number that is checked cannot disagree.
func parseUnixSeconds(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// checkTimestamp parses a timestamp header value and checks it is within tolerance of
// now in either direction (a future timestamp is as suspect as an old one).
func checkTimestamp(name, value string, now time.Time, tolerance time.Duration) *Error {
	ts, ok := parseUnixSeconds(value)
	if !ok {
		return fail(ReasonMalformedHeader, "%s is not a Unix timestamp in seconds", name)
	}
	// Compare without negating a Duration: now.Sub saturates at the Duration bounds, and
	// negating the minimum Duration would overflow into a small value and pass.
	diff := now.Sub(time.Unix(ts, 0))
	if diff > tolerance || diff < -tolerance {
		return fail(ReasonTimestampOutOfTolerance, "%s is outside the %s tolerance", name, tolerance)
	}
	return nil
}

// decodeSignature decodes one signature and checks its length. Only the alphabet of the
// encoding is accepted (the base64 decoder would otherwise skip embedded newlines) and
// base64 is decoded strictly, so every MAC has exactly one accepted base64 text, and hex
// only its two letter cases.
func decodeSignature(encoding v1alpha1.SignatureEncoding, s string, size int) ([]byte, bool) {
	if s == "" {
		return nil, false
	}
	var (
		decoded []byte
		err     error
	)
	if encoding == v1alpha1.EncodingBase64 {
		for i := 0; i < len(s); i++ {
			c := s[i]
			if !isLetter(c) && !isDigit(c) && c != '+' && c != '/' && c != '=' {
				return nil, false
			}
		}
		decoded, err = base64.StdEncoding.Strict().DecodeString(s)
	} else {
		decoded, err = hex.DecodeString(s)
	}
	if err != nil || len(decoded) != size {
		return nil, false
	}
	return decoded, true
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
