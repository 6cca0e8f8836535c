package testsupport

import (
	"crypto/rand"
	"encoding/hex"
)

// RandomHex is n random bytes in hex (2n characters), for names and secrets a test
// run must not share with another.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
