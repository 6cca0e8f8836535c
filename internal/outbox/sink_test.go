package outbox

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/hookkeeper/hookkeeper/internal/metrics"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// request is one request the outage sink served: when it started and ended, and what
// it answered.
type request struct {
	Key        string
	Start, End time.Time
	Status     int
}

// outageSink answers 503 until recover is called, then 200, taking outageLatency for
// each request: longer than the probe interval of the test, so that only the probe's
// lease, not its spacing, keeps two probes from overlapping.
type outageSink struct {
	*sink
	mu       sync.Mutex
	up       bool
	requests []request
}

const outageLatency = 100 * time.Millisecond

func newOutageSink(t *testing.T) *outageSink {
	o := &outageSink{}
	o.sink = newSink(t, func(a arrival, _ int) int {
		time.Sleep(outageLatency)
		o.mu.Lock()
		defer o.mu.Unlock()
		status := http.StatusServiceUnavailable
		if o.up {
			status = http.StatusOK
		}
		o.requests = append(o.requests, request{Key: a.Key, Start: a.At, End: time.Now(), Status: status})
		return status
	})
	return o
}

func (o *outageSink) recover() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.up = true
}

func (o *outageSink) since(t time.Time) []request {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []request
	for _, r := range o.requests {
		if !r.Start.Before(t) {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

// A sink down for a while, before two dispatchers: after SinkDownAfter unavailable
// answers they hold the backlog and send one probe at a time, at most ProbeIntervalMax
// apart, each probe taking the next due row; no row spends its attempts (rows are probed
// more often than maxAttempts, and none is dead-lettered); the state is readable for the operator and
// the gauge says down. Once the sink answers, delivery resumes by itself, the backlog
// drains and each key is delivered exactly once.
func TestSinkDownHoldsRowsAndProbesOneAtATime(t *testing.T) {
	db := newTestDB(t)
	var rows []outboxRow
	for seq := range 4 {
		for e := range 10 {
			rows = append(rows, outboxRow{Entity: fmt.Sprintf("ent%02d", e), Seq: seq})
		}
	}
	ids := db.insert(t, rows...)
	o := newOutageSink(t)
	var ds []*Dispatcher
	for range 2 {
		opts := db.options(t, o.srv.URL)
		opts.MaxAttempts = 3
		opts.BackoffInitial, opts.BackoffMax = 20*time.Millisecond, time.Second
		opts.ProbeIntervalMax = outageLatency / 2
		opts.PollInterval = 20 * time.Millisecond
		d, _ := start(t, db.pool, opts)
		ds = append(ds, d)
	}
	ctx := context.Background()

	h := db.awaitSinkHealth(t, "the sink is held down", func(h SinkHealth) bool { return h.Down })
	if h.ConsecutiveFailures < DefaultSinkDownAfter || h.LastError != "sink answered 503" || h.DownSince == nil || h.FailingSince == nil || h.NextProbeAt == nil {
		t.Errorf("sink health when down: %+v", h)
	}
	// Requests claimed before the outage was known have finished well within this.
	settled := time.Now().Add(3 * outageLatency)
	// Probes rotate over the 10 entities' first rows: 45 of them probe some row more
	// than maxAttempts times.
	testsupport.Eventually(t, 30*time.Second, 20*time.Millisecond, "probes during the outage", func() bool {
		return len(o.since(settled)) >= 45
	})
	probes := o.since(settled)
	for i := 1; i < len(probes); i++ {
		if probes[i].Start.Before(probes[i-1].End) {
			t.Errorf("two requests in flight at once while the sink was down: %+v and %+v", probes[i-1], probes[i])
		}
		// The probe interval (at most 50 ms) plus a poll and the claim; one that stopped
		// probing would be far further.
		if gap := probes[i].Start.Sub(probes[i-1].End); gap > time.Second {
			t.Errorf("probe %d came %s after the previous one, more than the capped interval allows", i, gap)
		}
	}
	if dead := db.count(t, "dead_at IS NOT NULL"); dead != 0 {
		t.Errorf("%d rows dead-lettered while the sink was down", dead)
	}
	if n := db.count(t, "attempts > 3"); n != 0 {
		t.Errorf("%d rows spent more than maxAttempts", n)
	}
	perKey := map[string]int{}
	for _, p := range probes {
		perKey[p.Key]++
	}
	if most := maxCount(perKey); most <= 3 {
		t.Errorf("no row was probed more than maxAttempts (3) times (%v): the test does not show attempts are kept", perKey)
	}
	testsupport.Eventually(t, 5*time.Second, 10*time.Millisecond, "the sink-down gauge", func() bool {
		return testutil.ToFloat64(metrics.SinkDown.WithLabelValues(testEndpoint)) == 1
	})
	if b, err := ds[0].Backlog(ctx); err != nil || !b.SinkDown || b.Pending != int64(len(rows)) {
		t.Errorf("backlog while down: %+v, %v", b, err)
	}

	o.recover()
	recovered := time.Now()
	testsupport.Eventually(t, 20*time.Second, 10*time.Millisecond, "the backlog drains", func() bool {
		return db.count(t, "delivered_at IS NOT NULL") == len(rows)
	})
	// The first probe after recovery is at most the capped interval away.
	took := time.Since(recovered)
	if took > 10*time.Second {
		t.Errorf("draining took %s after the sink came back", took)
	}
	t.Logf("outage: %d probes after it settled, at most %d of one row; %d rows drained %s after the sink came back",
		len(probes), maxCount(perKey), len(rows), took)
	delivered := map[string]int{}
	for _, r := range o.since(time.Time{}) {
		if r.Status == http.StatusOK {
			delivered[r.Key]++
		}
	}
	for _, r := range rows {
		if delivered[r.key()] != 1 {
			t.Errorf("key %s delivered %d times, want 1", r.key(), delivered[r.key()])
		}
	}
	h, err := ReadSinkHealth(ctx, db.pool, db.tables, testEndpoint)
	if err != nil || h.Down || h.ConsecutiveFailures != 0 || h.RecoveredAt == nil || h.Backlog.Pending != 0 || h.Backlog.Dead != 0 {
		t.Errorf("sink health after recovery: %+v, %v", h, err)
	}
	testsupport.Eventually(t, 5*time.Second, 10*time.Millisecond, "the sink-down gauge clears", func() bool {
		return testutil.ToFloat64(metrics.SinkDown.WithLabelValues(testEndpoint)) == 0
	})
	if st := db.state(t, ids[0]); st.Attempts > 3 || !st.Delivered {
		t.Errorf("first row: %+v", st)
	}
}

// A sink that answers, even with an error about the row, is not down: a 4xx resets the
// count and rows are dead-lettered after maxAttempts as before.
func TestSinkRefusingRowsIsNotDown(t *testing.T) {
	db := newTestDB(t)
	db.insert(t, outboxRow{Entity: "ord_1", Seq: 0}, outboxRow{Entity: "ord_2", Seq: 0})
	s := newSink(t, func(arrival, int) int { return http.StatusUnprocessableEntity })
	opts := db.options(t, s.srv.URL)
	opts.MaxAttempts = DefaultSinkDownAfter + 2
	start(t, db.pool, opts)
	testsupport.Eventually(t, 20*time.Second, 10*time.Millisecond, "dead letters", func() bool { return db.count(t, "dead_at IS NOT NULL") == 2 })
	h, err := ReadSinkHealth(context.Background(), db.pool, db.tables, testEndpoint)
	if err != nil || h.Down || h.ConsecutiveFailures != 0 || h.DownSince != nil {
		t.Errorf("sink health with a sink that answers 422: %+v, %v", h, err)
	}
}

func maxCount(m map[string]int) int {
	counts := make([]int, 0, len(m))
	for _, n := range m {
		counts = append(counts, n)
	}
	sort.Ints(counts)
	if len(counts) == 0 {
		return 0
	}
	return counts[len(counts)-1]
}

// One row the sink always fails (a 500 on one payload: a bug in the app, not an outage)
// makes the sink look down once it alone has failed SinkDownAfter times. The probes
// must then rotate to the other due rows, whose 2xx ends the outage, so other entities'
// rows are delivered; and with traffic flowing the failing row spends its attempts and
// is dead-lettered, for a person to see and re-drive, instead of being the only probe
// forever with its attempts given back.
func TestOneFailingRowDoesNotHoldTheSinkDown(t *testing.T) {
	db := newTestDB(t)
	bad := db.insert(t, outboxRow{Entity: "bad", Seq: 0})[0]
	s := newSink(t, func(a arrival, _ int) int {
		if a.Entity == "bad" {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	opts := db.probingOptions(t, s.srv.URL)
	opts.MaxAttempts = 8
	start(t, db.pool, opts)
	db.awaitSinkHealth(t, "the failing row takes the sink down", func(h SinkHealth) bool { return h.Down })

	// Other entities' rows arrive, one at a time, while the sink is held down.
	for seq := range 6 {
		id := db.insert(t, outboxRow{Entity: fmt.Sprintf("good%d", seq), Seq: 0})[0]
		testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond,
			fmt.Sprintf("row %d of another entity delivered while one row fails", seq), func() bool {
				return db.state(t, id).Delivered
			})
	}
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "the failing row dead-lettered", func() bool {
		return db.state(t, bad).Dead
	})
	if st := db.state(t, bad); st.Attempts != opts.MaxAttempts || st.LastError != "sink answered 500" {
		t.Errorf("failing row: %+v, want %d attempts and the sink's answer", st, opts.MaxAttempts)
	}
}
