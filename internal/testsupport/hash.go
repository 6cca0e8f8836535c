package testsupport

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// UnkeyedHash is SHA-256 over length-prefixed parts (n-byte big-endian lengths): what the
// operator's rollout and migration hashes were before they were keyed. Tests assert that
// no hash the operator writes equals it, so nobody who reads a Deployment can confirm a
// guessed secret by hashing it.
func UnkeyedHash(n int, parts ...[]byte) string {
	h := sha256.New()
	for _, b := range parts {
		l := make([]byte, 8)
		binary.BigEndian.PutUint64(l, uint64(len(b)))
		h.Write(l[8-n:])
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}
