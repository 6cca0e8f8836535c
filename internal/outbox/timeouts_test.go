package outbox

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// Chaos on the delivery side: two dispatchers race; the sink receives a request and
// then answers too late (the dispatcher's attempt times out after the sink got it) for
// the first attempt of every third row, and answers 503 to the first attempt of every
// fifth; one dispatcher is stopped while requests hang in the sink. Every row must
// reach the sink, every repeat must carry the same Idempotency-Key (and envelope id),
// and one entity's rows must be first received in id order.
func TestDispatchersUnderTimeoutsAndAStopKeepKeysAndOrder(t *testing.T) {
	db := newTestDB(t)
	const entities, perEntity = 12, 8
	rows := interleaved(entities, perEntity)
	db.insert(t, rows...)

	var mu sync.Mutex
	attempts := map[string]int{}
	var s *sink
	s = newSink(t, func(a arrival, _ int) int {
		mu.Lock()
		attempts[a.Key]++
		n := attempts[a.Key]
		mu.Unlock()
		switch {
		case n == 1 && a.Seq%3 == 1:
			// Received, processed, answer lost: longer than the attempt timeout.
			select {
			case <-time.After(700 * time.Millisecond):
			case <-s.release:
			}
			return http.StatusOK
		case n == 1 && a.Seq%5 == 2:
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	opts := db.options(t, s.srv.URL)
	opts.Timeout = 300 * time.Millisecond
	opts.Concurrency = 4
	opts.SinkDownAfter = 1000 // the injected failures are not an outage
	opts.ShutdownGrace = 100 * time.Millisecond
	_, stopFirst := start(t, db.pool, opts)
	start(t, db.pool, db.options(t, s.srv.URL))

	testsupport.Eventually(t, 30*time.Second, 10*time.Millisecond, "some rows delivered", func() bool {
		return db.count(t, "delivered_at IS NOT NULL") > len(rows)/4
	})
	stopFirst()
	testsupport.Eventually(t, 60*time.Second, 20*time.Millisecond, "all rows delivered", func() bool {
		return db.count(t, "delivered_at IS NOT NULL") == len(rows)
	})

	checkArrivals(t, s.snapshot(), len(rows))
	// s.overlap is not checked: a sink that goes on processing a request after the
	// dispatcher gave up on it overlaps with the retry by construction.
}
