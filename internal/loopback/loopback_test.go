package loopback

import (
	"context"
	"net"
	"testing"
)

// The address FreeAddr returns can be listened on, and two calls while the first is
// held give different ports.
func TestFreeAddr(t *testing.T) {
	ctx := context.Background()
	addr, err := FreeAddr(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	defer func() { _ = l.Close() }()
	other, err := FreeAddr(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if other == addr {
		t.Fatalf("FreeAddr returned %s, which is in use", addr)
	}
}
