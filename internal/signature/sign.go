package signature

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strconv"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// SignStandardWebhooks returns the webhook-signature value ("v1,<base64>") of a message
// signed with a decoded Standard Webhooks key (see DecodeWhsec). The dispatcher signs
// its deliveries with it.
func SignStandardWebhooks(key []byte, id string, ts time.Time, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + strconv.FormatInt(ts.Unix(), 10) + "."))
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// SigningKey is one key that signs requests the way a provider does, for
// `hookkeeper send-test`: an HMAC secret decoded as its Secret stores it, or an Ed25519
// private key (which no endpoint's Secret holds: those hold the provider's public key,
// so only tests sign with one). Printing it never shows the key.
type SigningKey struct {
	// newHash is the HMAC hash; nil for an Ed25519 key.
	newHash  func() hash.Hash
	material []byte
}

// NewHMACSigningKey decodes an HMAC secret stored with the given encoding, as the
// verifiers decode it (NewHMACKeyring). Errors never contain the value.
func NewHMACSigningKey(newHash func() hash.Hash, encoding v1alpha1.KeyEncoding, value string) (SigningKey, error) {
	if newHash == nil {
		return SigningKey{}, errors.New("no HMAC hash")
	}
	if err := plainValue(value); err != nil {
		return SigningKey{}, err
	}
	material, err := decodeKey(encoding, value)
	if err != nil {
		return SigningKey{}, err
	}
	return SigningKey{newHash: newHash, material: material}, nil
}

// NewEd25519SigningKey returns the signing key of an Ed25519 private key.
func NewEd25519SigningKey(key ed25519.PrivateKey) (SigningKey, error) {
	if len(key) != ed25519.PrivateKeySize {
		return SigningKey{}, fmt.Errorf("an Ed25519 private key is %d bytes, got %d", ed25519.PrivateKeySize, len(key))
	}
	return SigningKey{material: key}, nil
}

// Sign returns the signature of the concatenation of parts: an HMAC, or an Ed25519
// signature.
func (k SigningKey) Sign(parts ...[]byte) []byte {
	if k.newHash == nil {
		var msg []byte
		for _, p := range parts {
			msg = append(msg, p...)
		}
		return ed25519.Sign(ed25519.PrivateKey(k.material), msg)
	}
	m := hmac.New(k.newHash, k.material)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// String hides the key.
func (k SigningKey) String() string { return "signature.SigningKey(redacted)" }

// GoString hides the key from %#v.
func (k SigningKey) GoString() string { return k.String() }

// Message is what a signer signs: the body and the values a scheme signs beside it.
type Message struct {
	Body []byte
	// Method is the request method ({method}); empty is POST.
	Method string
	// Time is the signed timestamp, written in the scheme's TimestampFormat.
	Time time.Time
	// Timestamp, when set, is written instead of Time as is: a test that reproduces a
	// published request needs its exact text.
	Timestamp string
	// ID is the delivery id of a scheme that signs one ({id}).
	ID string
}

// FormatTimestamp writes t in format, as providers send it.
func FormatTimestamp(format v1alpha1.TimestampFormat, t time.Time) string {
	switch format {
	case v1alpha1.TimestampUnixMilli:
		return strconv.FormatInt(t.UnixMilli(), 10)
	case v1alpha1.TimestampRFC3339:
		return t.UTC().Format(time.RFC3339Nano)
	}
	return strconv.FormatInt(t.Unix(), 10)
}

// EncodeSignature writes a signature in encoding (lower-case hex, or standard base64).
func EncodeSignature(encoding v1alpha1.SignatureEncoding, sig []byte) string {
	if encoding == v1alpha1.EncodingBase64 {
		return base64.StdEncoding.EncodeToString(sig)
	}
	return hex.EncodeToString(sig)
}

// Sign returns the headers of the scheme's first header set that carry m signed with
// key, as the provider sends them: the signature header (with its prefix, or the
// composite's timestamp and signature pairs), and the timestamp and id headers the
// scheme signs. The signature verifies with the verifier of the same scheme and the
// key's secret (or public key).
func (s Scheme) Sign(key SigningKey, m Message) (http.Header, error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	if key.material == nil {
		return nil, errors.New("no signing key")
	}
	set := s.HeaderSets[0]
	usesTimestamp := s.Template.Uses(PlaceholderTimestamp)
	timestamp := m.Timestamp
	if usesTimestamp && timestamp == "" {
		if m.Time.IsZero() {
			return nil, errors.New("the scheme signs a timestamp: the message has no time")
		}
		timestamp = FormatTimestamp(s.TimestampFormat, m.Time)
	}
	if s.Template.Uses(PlaceholderID) && m.ID == "" {
		return nil, errors.New("the scheme signs a delivery id: the message has none")
	}
	method := m.Method
	if method == "" {
		method = http.MethodPost
	}
	parts := s.Template.expand(signedValues{body: m.Body, timestamp: timestamp, id: m.ID, method: method, url: s.URL})
	sig := EncodeSignature(s.Encoding, key.Sign(parts...))
	h := http.Header{}
	if c := s.Composite; c != nil {
		value := c.SignatureKey + c.KeyValueSeparator + sig
		if c.TimestampKey != "" {
			value = c.TimestampKey + c.KeyValueSeparator + timestamp + c.PairSeparator + value
		}
		h.Set(set.Signature, value)
	} else {
		h.Set(set.Signature, s.Prefix+sig)
		if set.Timestamp != "" {
			h.Set(set.Timestamp, timestamp)
		}
	}
	if set.ID != "" {
		h.Set(set.ID, m.ID)
	}
	return h, nil
}
