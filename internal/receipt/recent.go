package receipt

import (
	"crypto/sha256"
	"sync"
	"time"
)

// Recent events: the duplicate that costs nothing
//
// A provider's retry of an event this process has already committed and acknowledged is
// the most common duplicate (a timeout on the provider's side, a retry storm after an
// outage). The Recorder remembers the ids of the last events whose receipts it wrote,
// and answers a delivery whose every event is among them as a duplicate before it touches
// the database: no connection, no lock on the entity, no round trip.
//
// Only events whose receipt this Recorder wrote are remembered: ids enter after their
// transaction's COMMIT succeeded, never for a transaction that failed, an event turned
// away with ErrRetryLater, or a copy the database found recorded already (whose first
// receipt's age this process does not know). A remembered event was acknowledged as
// committed, so answering its copy 2xx promises nothing the first answer did not. An
// event this process has not seen (another replica's, or one remembered longer ago than
// the last n) takes the normal path, where the unique constraint decides.
//
// Retention deletes a receipt's dedupe record spec.retention.dedupeFor after it was
// received, and a redelivery after that is recorded again; an id is forgotten a minute
// (recentMargin) before that, so this memory never answers for longer than the
// database would.
//
// Keys are the first 16 bytes of SHA-256 of the event id: fixed size whatever the
// provider's ids look like, and no two distinct ids share one in practice.

// DefaultRecentEvents is how many ids of receipts it wrote a Recorder remembers
// (WithRecentEvents): 2.2 MiB of heap when full, grown only as events arrive.
const DefaultRecentEvents = 32768

// WithRecentEvents sets how many ids of receipts it wrote the Recorder remembers to answer
// their copies without the database; 0 turns the memory off.
func WithRecentEvents(n int) Option {
	return func(r *Recorder) { r.recent = newRecentEvents(n) }
}

// recentMargin is how long before spec.retention.dedupeFor an id is forgotten: the
// receiver's clock and the database's need not agree to the second.
const recentMargin = time.Minute

type eventKey [16]byte

func keyOf(id string) eventKey {
	sum := sha256.Sum256([]byte(id))
	return eventKey(sum[:16])
}

// recentEvents is a set of the last max event ids added, oldest forgotten first, and
// none older than maxAge (0: no limit). Nil remembers nothing.
type recentEvents struct {
	mu     sync.Mutex
	max    int
	maxAge time.Duration
	now    func() time.Time
	set    map[eventKey]int64 // when added, Unix nanoseconds
	ring   []eventKey         // in the order added, from next once full
	next   int
}

func newRecentEvents(max int) *recentEvents {
	if max <= 0 {
		return nil
	}
	return &recentEvents{max: max, now: time.Now, set: map[eventKey]int64{}}
}

// forgetAfter limits how long an id is remembered to dedupeFor less recentMargin; no
// limit when dedupeFor is 0 (dedupe records kept forever). A window no longer than the
// margin leaves nothing to remember: it returns nil.
func (s *recentEvents) forgetAfter(dedupeFor time.Duration) *recentEvents {
	switch {
	case s == nil || dedupeFor <= 0:
		return s
	case dedupeFor <= recentMargin:
		return nil
	}
	s.maxAge = dedupeFor - recentMargin
	return s
}

// hasAll tells whether every event of evs was added, not longer than maxAge ago, and
// is not forgotten yet.
func (s *recentEvents) hasAll(evs []Event) bool {
	if s == nil || len(evs) == 0 {
		return false
	}
	now := s.now().UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range evs {
		added, ok := s.set[keyOf(evs[i].ID)]
		if !ok || (s.maxAge > 0 && time.Duration(now-added) >= s.maxAge) {
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
	now := s.now().UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.set[k]; ok {
		return
	}
	s.set[k] = now
	if len(s.ring) < s.max {
		s.ring = append(s.ring, k)
		return
	}
	delete(s.set, s.ring[s.next])
	s.ring[s.next] = k
	s.next = (s.next + 1) % s.max
}
