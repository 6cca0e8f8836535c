package receipt

import (
	"crypto/sha256"
	"sync"
)

// Recent events: the duplicate that costs nothing
//
// A provider's retry of an event this process has already committed and acknowledged is
// the most common duplicate (a timeout on the provider's side, a retry storm after an
// outage). The Recorder remembers the ids of the last events it saw committed, and
// answers a delivery whose every event is among them as a duplicate before it touches
// the database: no connection, no lock on the entity, no round trip.
//
// Only committed events are remembered: ids enter after their transaction's COMMIT
// succeeded (recorded, or found recorded already), never for a transaction that failed
// or an event turned away with ErrRetryLater. A remembered event was acknowledged as
// committed, so answering its copy 2xx promises nothing the first answer did not. An
// event this process has not seen (another replica's, or one remembered longer ago than
// the last n) takes the normal path, where the unique constraint decides.
//
// Keys are the first 16 bytes of SHA-256 of the event id: fixed size whatever the
// provider's ids look like, and no two distinct ids share one in practice.

// DefaultRecentEvents is how many committed event ids a Recorder remembers
// (WithRecentEvents): 1.7 MiB of heap when full, grown only as events arrive.
const DefaultRecentEvents = 32768

// WithRecentEvents sets how many committed event ids the Recorder remembers to answer
// their copies without the database; 0 turns the memory off.
func WithRecentEvents(n int) Option {
	return func(r *Recorder) { r.recent = newRecentEvents(n) }
}

type eventKey [16]byte

func keyOf(id string) eventKey {
	sum := sha256.Sum256([]byte(id))
	return eventKey(sum[:16])
}

// recentEvents is a set of the last max event ids added, oldest forgotten first.
// Nil remembers nothing.
type recentEvents struct {
	mu   sync.Mutex
	max  int
	set  map[eventKey]struct{}
	ring []eventKey // in the order added, from next once full
	next int
}

func newRecentEvents(max int) *recentEvents {
	if max <= 0 {
		return nil
	}
	return &recentEvents{max: max, set: map[eventKey]struct{}{}}
}

// hasAll tells whether every event of evs was added (and is not forgotten yet).
func (s *recentEvents) hasAll(evs []Event) bool {
	if s == nil || len(evs) == 0 {
		return false
	}
	keys := make([]eventKey, len(evs))
	for i := range evs {
		keys[i] = keyOf(evs[i].ID)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		if _, ok := s.set[k]; !ok {
			return false
		}
	}
	return true
}

// add remembers id, forgetting the oldest id when full.
func (s *recentEvents) add(id string) {
	if s == nil || id == "" {
		return
	}
	k := keyOf(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.set[k]; ok {
		return
	}
	s.set[k] = struct{}{}
	if len(s.ring) < s.max {
		s.ring = append(s.ring, k)
		return
	}
	delete(s.set, s.ring[s.next])
	s.ring[s.next] = k
	s.next = (s.next + 1) % s.max
}
