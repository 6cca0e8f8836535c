package resources

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
)

// HashKeyBytes is the length of the per-install key of the rollout hashes.
const HashKeyBytes = 32

// keyedHash is an HMAC-SHA256 under key over length-prefixed parts, so no two inputs
// share an encoding. The rollout hashes cover Secret values and sit in annotations that
// anyone with read access to Deployments and Jobs sees: a plain digest would let them
// test guesses of a weak secret offline, a keyed one does not without the key (which
// lives in a Secret in the operator's namespace).
type keyedHash struct{ h hash.Hash }

func newKeyedHash(key []byte) keyedHash { return keyedHash{h: hmac.New(sha256.New, key)} }

func (k keyedHash) write(part []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(part)))
	k.h.Write(n[:])
	k.h.Write(part)
}

func (k keyedHash) sum() string { return hex.EncodeToString(k.h.Sum(nil)) }
