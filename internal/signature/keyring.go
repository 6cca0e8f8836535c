package signature

import (
	"crypto/ed25519"
	"crypto/hmac"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"strings"
	"time"
	"unicode"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// Keyring is the one place that holds decoded keys and checks signatures with them:
// HMAC secrets, or Ed25519 public keys. Every provider reduces a request to "these
// candidate signatures over these message parts" and hands that to Match, so the
// security-relevant code is written once.
type Keyring struct {
	// newHash is the HMAC hash; nil for an Ed25519 keyring.
	newHash func() hash.Hash
	keys    []Key
	// size is the length of one signature (the hash's, or Ed25519's).
	size int
}

// Key is one decoded key with its expiry.
type Key struct {
	material  []byte
	expiresAt time.Time
}

// NewHMACKeyring decodes HMAC secrets stored with the given encoding. Errors name the
// secret's index, never its value.
func NewHMACKeyring(newHash func() hash.Hash, encoding v1alpha1.KeyEncoding, secrets []Secret) (*Keyring, error) {
	return newKeyring(newHash, secrets, func(value string) ([]byte, error) { return decodeKey(encoding, value) })
}

// NewEd25519Keyring decodes Ed25519 public keys (32 bytes) stored with the given
// encoding.
func NewEd25519Keyring(encoding v1alpha1.PublicKeyEncoding, secrets []Secret) (*Keyring, error) {
	return newKeyring(nil, secrets, func(value string) ([]byte, error) { return decodePublicKey(encoding, value) })
}

func newKeyring(newHash func() hash.Hash, secrets []Secret, decode func(string) ([]byte, error)) (*Keyring, error) {
	if len(secrets) == 0 {
		return nil, ErrNoSecrets
	}
	k := &Keyring{newHash: newHash, keys: make([]Key, 0, len(secrets)), size: ed25519.SignatureSize}
	if newHash != nil {
		k.size = newHash().Size()
	}
	for i, s := range secrets {
		if err := plainValue(s.Value); err != nil {
			return nil, fmt.Errorf("signing secret %d: %w", i, err)
		}
		material, err := decode(s.Value)
		if err != nil {
			// The index, never the value: this error reaches status conditions and logs.
			return nil, fmt.Errorf("signing secret %d: %w", i, err)
		}
		k.keys = append(k.keys, Key{material: material, expiresAt: s.ExpiresAt})
	}
	return k, nil
}

// SignatureSize is the length of one signature, used to discard candidates that cannot
// match.
func (k *Keyring) SignatureSize() int { return k.size }

// Active returns the keys that verify at now. A zero now returns none, so a caller that
// forgot to pass the clock cannot resurrect expired keys.
func (k *Keyring) Active(now time.Time) ([]Key, *Error) {
	if now.IsZero() {
		return nil, Fail(ReasonNoActiveSecret, "the request carries no time, so no secret can be judged active")
	}
	var keys []Key
	for _, key := range k.keys {
		if key.expiresAt.IsZero() || now.Before(key.expiresAt) {
			keys = append(keys, key)
		}
	}
	if len(keys) == 0 {
		return nil, Fail(ReasonNoActiveSecret, "all %d signing secrets have expired", len(k.keys))
	}
	return keys, nil
}

// Match reports whether any of keys signed the concatenation of parts with any of
// candidates, and which key did. HMAC comparisons are constant-time; it returns on the
// first match, which reveals only that a match exists.
func (k *Keyring) Match(keys []Key, candidates [][]byte, parts ...[]byte) (Key, bool) {
	var message []byte
	if k.newHash == nil {
		for _, p := range parts {
			message = append(message, p...)
		}
	}
	for _, key := range keys {
		if k.newHash == nil {
			for _, candidate := range candidates {
				if ed25519.Verify(ed25519.PublicKey(key.material), message, candidate) {
					return key, true
				}
			}
			continue
		}
		expected := k.mac(key.material, parts...)
		for _, candidate := range candidates {
			if hmac.Equal(expected, candidate) {
				return key, true
			}
		}
	}
	return Key{}, false
}

// mac computes the HMAC of the concatenation of parts, without copying the body.
func (k *Keyring) mac(key []byte, parts ...[]byte) []byte {
	m := hmac.New(k.newHash, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// plainValue rejects empty secrets and surrounding whitespace: a trailing newline (the
// usual result of `kubectl create secret --from-file`) would otherwise silently become
// part of the key and fail every request.
func plainValue(value string) error {
	if value == "" {
		return errors.New("the secret is empty")
	}
	if strings.TrimFunc(value, unicode.IsSpace) != value {
		return errors.New("the secret has leading or trailing whitespace (often a newline from --from-file); store it without")
	}
	return nil
}

// decodeKey turns a stored secret into HMAC key bytes.
func decodeKey(encoding v1alpha1.KeyEncoding, value string) ([]byte, error) {
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

// decodePublicKey turns a stored Ed25519 public key into its 32 bytes.
func decodePublicKey(encoding v1alpha1.PublicKeyEncoding, value string) ([]byte, error) {
	var (
		key []byte
		err error
	)
	switch encoding {
	case v1alpha1.PublicKeyHex, "":
		key, err = hex.DecodeString(value)
	case v1alpha1.PublicKeyBase64:
		key, err = base64.StdEncoding.DecodeString(value)
	case v1alpha1.PublicKeyWhpk:
		encoded, ok := strings.CutPrefix(value, "whpk_")
		if !ok {
			return nil, errors.New("the public key does not start with whpk_")
		}
		key, err = base64.StdEncoding.DecodeString(encoded)
	default:
		return nil, fmt.Errorf("unknown public key encoding %q", encoding)
	}
	if err != nil {
		return nil, fmt.Errorf("the public key is not valid %s", encoding)
	}
	if len(key) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("the public key is %d bytes; an Ed25519 public key is %d", len(key), ed25519.PublicKeySize)
	}
	return key, nil
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
