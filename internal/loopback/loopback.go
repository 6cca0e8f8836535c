// Package loopback finds free 127.0.0.1 ports for local servers the project starts
// itself: throwaway PostgreSQL, the local control plane, the demo's receiver, tests and
// benchmarks. The port was free a moment ago; the caller listens on it right after.
package loopback

import (
	"context"
	"fmt"
	"net"
	"strconv"
)

// FreePort returns a 127.0.0.1 TCP port that was free a moment ago.
func FreePort(ctx context.Context) (int, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("release the probed port: %w", err)
	}
	return port, nil
}

// FreeAddr is FreePort as a host:port address.
func FreeAddr(ctx context.Context) (string, error) {
	port, err := FreePort(ctx)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}
