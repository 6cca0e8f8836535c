package devcluster

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
)

// ipPool hands out loopback addresses 127.0.0.2 ... 127.0.0.254 as Pod IPs. Linux routes
// all of 127.0.0.0/8 to the loopback interface, so a process can bind any of them without
// configuration. 127.0.0.1 stays with the host (API server, Service proxy). Freed
// addresses go to the back of the queue so that a new Pod rarely inherits the address of
// one that just went away.
type ipPool struct {
	mu    sync.Mutex
	free  []netip.Addr
	inUse map[netip.Addr]bool
}

func newIPPool() *ipPool {
	p := &ipPool{inUse: map[netip.Addr]bool{}}
	for n := 2; n <= 254; n++ {
		p.free = append(p.free, netip.AddrFrom4([4]byte{127, 0, 0, byte(n)}))
	}
	return p
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
