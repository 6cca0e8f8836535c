package refetch

import (
	"context"
	"sync"
	"time"
)

// DefaultCacheTTL is how long a fetched object may answer later events about it.
const DefaultCacheTTL = 2 * time.Second

// maxCacheEntries bounds the cache; past it, expired entries are swept and, if that is
// not enough, the cache starts over (it only saves calls, it never decides anything).
const maxCacheEntries = 4096

// cache shares fetches of one object between the events of a burst (a
// payment_intent.succeeded, its charge.succeeded and a retried copy of either arrive
// within milliseconds of each other).
//
// The trade-off: a shared answer may be older than the event it confirms. Stripe sends
// an event after the change it reports, so an answer fetched before the event arrived
// can predate that change: a cached "processing" must not turn a genuine
// payment_intent.succeeded into guard_failed, a permanent outcome. Hence a shared
// answer (from the cache, or from a call already in flight when the event arrived) is
// used only when it agrees with the status the event's own copy of the object states;
// otherwise the event gets a fetch that starts after it arrived, and that answer is
// final. Agreement plus a short TTL bounds what sharing can hide to a change that
// happened within the TTL after an earlier fetch and whose own event has not arrived
// yet, which a fetch without cache could equally miss by a few milliseconds. Errors are
// never cached: the next event asks again.
type cache struct {
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	entries map[string]cacheEntry
	calls   map[string]*call
}

type cacheEntry struct {
	live Live
	at   time.Time
}

// call is one fetch in flight; waiters read live and err after done is closed.
type call struct {
	done    chan struct{}
	started time.Time
	live    Live
	err     error
}

func newCache(ttl time.Duration, now func() time.Time) *cache {
	return &cache{ttl: ttl, now: now, entries: map[string]cacheEntry{}, calls: map[string]*call{}}
}

// agrees reports whether a shared answer may confirm an event whose copy of the object
// states status claimed. An event that states none accepts any fresh-enough answer.
func agrees(l Live, claimed string) bool {
	return claimed == "" || l.Status == claimed
}

// get returns the object under key: from the cache, from a call in flight, or from a
// new call of fetch. fetch runs detached from ctx (its own timeout bounds it), so a
// waiter that gives up does not fail the others; ctx only bounds this caller's wait.
func (c *cache) get(ctx context.Context, key, claimed string, fetch func(context.Context) (Live, error)) (Live, error) {
	arrived := c.now()
	for {
		c.mu.Lock()
		if e, ok := c.entries[key]; ok && c.ttl > 0 && arrived.Sub(e.at) < c.ttl && agrees(e.live, claimed) {
			c.mu.Unlock()
			return e.live, nil
		}
		cl, inFlight := c.calls[key]
		if !inFlight {
			cl = &call{done: make(chan struct{}), started: c.now()}
			c.calls[key] = cl
			go c.run(context.WithoutCancel(ctx), key, cl, fetch)
		}
		c.mu.Unlock()

		select {
		case <-cl.done:
		case <-ctx.Done():
			return Live{}, newError(unavailable, "refetch: gave up waiting for the provider: %v", ctx.Err())
		}
		if cl.err != nil {
			return Live{}, cl.err
		}
		if !cl.started.Before(arrived) || agrees(cl.live, claimed) {
			return cl.live, nil
		}
		// The call began before this event arrived and disagrees with it: it may
		// predate the change the event reports. The next round starts a call of its own
		// (or joins one that started after this event arrived).
	}
}

func (c *cache) run(ctx context.Context, key string, cl *call, fetch func(context.Context) (Live, error)) {
	cl.live, cl.err = fetch(ctx)
	c.mu.Lock()
	delete(c.calls, key)
	if cl.err == nil && c.ttl > 0 {
		c.store(key, cacheEntry{live: cl.live, at: cl.started})
	}
	c.mu.Unlock()
	close(cl.done)
}

// store adds an entry; c.mu is held. The entry's time is when its call started, so the
// TTL never stretches by the call's latency.
func (c *cache) store(key string, e cacheEntry) {
	if len(c.entries) >= maxCacheEntries {
		now := c.now()
		for k, old := range c.entries {
			if now.Sub(old.at) >= c.ttl {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= maxCacheEntries {
			c.entries = map[string]cacheEntry{}
		}
	}
	c.entries[key] = e
}
