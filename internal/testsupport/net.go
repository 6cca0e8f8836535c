package testsupport

import (
	"net"
	"testing"
)

// FreeAddr returns a 127.0.0.1 address with a port nothing listens on now, for a
// subprocess that must be told its address before it starts.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		tb.Fatal(err)
	}
	return addr
}
