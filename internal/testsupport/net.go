package testsupport

import (
	"context"
	"testing"

	"github.com/hookkeeper/hookkeeper/internal/loopback"
)

// FreeAddr returns a 127.0.0.1 address with a port nothing listens on now, for a
// subprocess that must be told its address before it starts; the test fails if none
// can be found.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	addr, err := loopback.FreeAddr(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return addr
}
