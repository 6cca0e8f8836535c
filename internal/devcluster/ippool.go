package devcluster

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// ipPool hands out loopback addresses 127.0.X.2 ... 127.0.X.254 as Pod IPs. Linux routes
// all of 127.0.0.0/8 to the loopback interface, so a process can bind any of them without
// configuration. 127.0.0.1 stays with the host (API server, Service proxy). Freed
// addresses go to the back of the queue so that a new Pod rarely inherits the address of
// one that just went away. X is the cluster's subnet (claimSubnet): 0 unless another
// local cluster on the machine holds it.
type ipPool struct {
	mu    sync.Mutex
	free  []netip.Addr
	inUse map[netip.Addr]bool
}

func newIPPool(subnet byte) *ipPool {
	p := &ipPool{inUse: map[netip.Addr]bool{}}
	for n := 2; n <= 254; n++ {
		p.free = append(p.free, netip.AddrFrom4([4]byte{127, 0, subnet, byte(n)}))
	}
	return p
}

// claimSubnet picks the loopback subnet 127.0.X.0/24 for this cluster's Pod IPs: the
// first X whose lock file (in the temporary directory) no other process holds and on
// which nothing listens but the host's 127.0.X.1, so a second local cluster on the
// machine (make dev beside make test's e2e, say) never binds a Pod address the first
// uses. The lock is held until release is called or the process ends.
func claimSubnet() (subnet byte, release func(), err error) {
	busy, err := listeningSubnets()
	if err != nil {
		return 0, nil, err
	}
	for x := 0; x <= 254; x++ {
		if busy[byte(x)] {
			continue
		}
		path := filepath.Join(os.TempDir(), fmt.Sprintf("hookkeeper-devcluster-127.0.%d.lock", x))
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600) //nolint:gosec // a fixed name in the temporary directory
		if err != nil {
			return 0, nil, fmt.Errorf("claim a loopback subnet: %w", err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			_ = f.Close()
			continue
		}
		return byte(x), func() { _ = f.Close() }, nil
	}
	return 0, nil, errors.New("claim a loopback subnet: 127.0.0.0/24 to 127.0.254.0/24 are all taken by other local clusters")
}

// listeningSubnets reports the subnets X with a TCP listener on 127.0.X.N, N >= 2, read
// from /proc/net/tcp (where addresses are hexadecimal, in the host's byte order).
func listeningSubnets() (map[byte]bool, error) {
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return nil, fmt.Errorf("read listening sockets: %w", err)
	}
	busy := map[byte]bool{}
	for _, line := range strings.Split(string(data), "\n")[1:] {
		fields := strings.Fields(line)
		if len(fields) < 4 || fields[3] != "0A" { // 0A: LISTEN
			continue
		}
		hexAddr, _, ok := strings.Cut(fields[1], ":")
		raw, err := hex.DecodeString(hexAddr)
		if !ok || err != nil || len(raw) != 4 {
			continue
		}
		a := [4]byte{raw[0], raw[1], raw[2], raw[3]}
		if binary.NativeEndian.Uint16([]byte{1, 0}) == 1 { // little-endian host
			a = [4]byte{raw[3], raw[2], raw[1], raw[0]}
		}
		if a[0] == 127 && a[1] == 0 && a[3] >= 2 {
			busy[a[2]] = true
		}
	}
	return busy, nil
}

var errPoolExhausted = errors.New("no free loopback Pod IP (127.0.0.2-254 are all in use)")

// reserve takes a specific address (a Pod that already reports it, e.g. after an agent
// restart) or, when want is invalid or taken, the next free one.
func (p *ipPool) reserve(want netip.Addr) (netip.Addr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if want.IsValid() && !p.inUse[want] {
		for i, a := range p.free {
			if a == want {
				p.free = append(p.free[:i], p.free[i+1:]...)
				p.inUse[a] = true
				return a, nil
			}
		}
	}
	if len(p.free) == 0 {
		return netip.Addr{}, errPoolExhausted
	}
	a := p.free[0]
	p.free = p.free[1:]
	p.inUse[a] = true
	return a, nil
}

func (p *ipPool) release(a netip.Addr) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.inUse[a] {
		return fmt.Errorf("release %s: not allocated", a)
	}
	delete(p.inUse, a)
	p.free = append(p.free, a)
	return nil
}
