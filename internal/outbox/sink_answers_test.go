package outbox

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// How a hostile or broken sink's answers are read, end to end through a real HTTP
// server: a redirect is not followed and is a failed attempt; a 2xx whose body is huge
// or never ends is delivered once (the status is the answer); a sink that never sends
// headers is no answer within the timeout. No existing test drives these answers.
func TestHostileSinkAnswers(t *testing.T) {
	// Also with a caller's client (Options.HTTPClient) whose CheckRedirect follows them,
	// as http.Client's zero value does.
	for name, client := range map[string]*http.Client{"": nil, ", with a caller's client": {}} {
		t.Run("redirect is not followed"+name, func(t *testing.T) {
			db := newTestDB(t)
			ids := db.insert(t, outboxRow{Entity: "ord_1", Seq: 0})
			var followed atomic.Int32
			target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { followed.Add(1) }))
			t.Cleanup(target.Close)
			s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, target.URL+"/elsewhere", http.StatusTemporaryRedirect)
			}))
			t.Cleanup(s.Close)
			opts := db.options(t, s.URL)
			opts.MaxAttempts = 2
			opts.HTTPClient = client
			start(t, db.pool, opts)
			testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "dead after 2 redirects", func() bool { return db.state(t, ids[0]).Dead })
			if st := db.state(t, ids[0]); st.Delivered || st.LastError != "sink answered 307" {
				t.Errorf("row after redirects: %+v", st)
			}
			if n := followed.Load(); n != 0 {
				t.Errorf("the redirect target got %d requests", n)
			}
		})
	}

	t.Run("200 with a huge or endless body is delivered once", func(t *testing.T) {
		for _, endless := range []bool{false, true} {
			db := newTestDB(t)
			ids := db.insert(t, outboxRow{Entity: "ord_1", Seq: 0})
			var hits atomic.Int32
			stop := make(chan struct{})
			s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				hits.Add(1)
				w.WriteHeader(http.StatusOK)
				w.(http.Flusher).Flush()
				chunk := []byte(strings.Repeat("x", 1<<16))
				for i := 0; endless || i < 512; i++ { // 32 MiB, or forever one byte at a time
					if endless {
						chunk = chunk[:1]
						select {
						case <-stop:
							return
						case <-time.After(50 * time.Millisecond):
						}
					}
					if _, err := w.Write(chunk); err != nil {
						return
					}
					w.(http.Flusher).Flush()
				}
			}))
			opts := db.options(t, s.URL)
			opts.Timeout = time.Second
			start(t, db.pool, opts)
			testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "delivered", func() bool { return db.state(t, ids[0]).Delivered })
			if st := db.state(t, ids[0]); st.Attempts != 1 || hits.Load() != 1 {
				t.Errorf("endless=%v: %+v after %d requests, want delivered at the first", endless, st, hits.Load())
			}
			close(stop)
			s.CloseClientConnections()
			s.Close()
		}
	})

	t.Run("no headers ever is no answer", func(t *testing.T) {
		db := newTestDB(t)
		ids := db.insert(t, outboxRow{Entity: "ord_1", Seq: 0})
		unstall := make(chan struct{})
		s := newBlockingSink(t, unstall)
		opts := db.options(t, s.srv.URL)
		opts.Timeout = 300 * time.Millisecond
		opts.BackoffInitial, opts.BackoffMax = time.Hour, time.Hour
		start(t, db.pool, opts)
		testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "a failed attempt", func() bool { return db.state(t, ids[0]).LastError != "" })
		if st := db.state(t, ids[0]); st.Delivered || st.LastError != "no answer within 300ms" {
			t.Errorf("row after a silent sink: %+v", st)
		}
		close(unstall)
	})

	// A sink that drops the connection without an answer. On a connection an earlier
	// delivery left open, Go's transport sends the request again at once (a POST with an
	// Idempotency-Key counts as safe to repeat): within the same attempt, with the same
	// key, before any backoff. On a new connection it does not, so a sink that always
	// drops gets one request per attempt, plus that one repeat, and the row is
	// dead-lettered after maxAttempts as for any other failure.
	for _, always := range []bool{false, true} {
		name := map[bool]string{false: "a dropped answer is re-sent at once, in the same attempt",
			true: "a sink that always drops gets a bounded number of requests"}[always]
		t.Run(name, func(t *testing.T) {
			db := newTestDB(t)
			ids := db.insert(t, outboxRow{Entity: "ord_1", Seq: 0}, outboxRow{Entity: "ord_1", Seq: 1})
			second := outboxRow{Entity: "ord_1", Seq: 1}.key()
			var mu sync.Mutex
			var seen []time.Time
			s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get(HeaderIdempotencyKey) != second {
					return // 200: the first row leaves an idle keep-alive connection behind
				}
				mu.Lock()
				seen = append(seen, time.Now())
				drop := always || len(seen) == 1
				mu.Unlock()
				if !drop {
					return
				}
				c, _, err := w.(http.Hijacker).Hijack()
				if err == nil {
					_ = c.Close()
				}
			}))
			t.Cleanup(s.Close)
			opts := db.options(t, s.URL)
			opts.MaxAttempts = 3
			// A retry by the dispatcher would come a second later at the earliest.
			opts.BackoffInitial, opts.BackoffMax = time.Second, time.Second
			start(t, db.pool, opts)
			testsupport.Eventually(t, 15*time.Second, 10*time.Millisecond, "the second row settled", func() bool {
				st := db.state(t, ids[1])
				return st.Delivered || st.Dead
			})
			st := db.state(t, ids[1])
			mu.Lock()
			defer mu.Unlock()
			if !always {
				if !st.Delivered || st.Attempts != 1 || len(seen) != 2 {
					t.Fatalf("row %+v after %d requests, want delivered on attempt 1 by the second request", st, len(seen))
				}
				if gap := seen[1].Sub(seen[0]); gap >= opts.BackoffInitial {
					t.Errorf("the repeat came %v after the dropped request, want at once", gap)
				}
				return
			}
			t.Logf("%d requests for %d attempts", len(seen), st.Attempts)
			if !st.Dead || st.Attempts != opts.MaxAttempts {
				t.Errorf("row after a sink that always drops: %+v, want dead after %d attempts", st, opts.MaxAttempts)
			}
			if len(seen) > opts.MaxAttempts+1 {
				t.Errorf("%d requests for %d attempts, want at most one repeat on the reused connection", len(seen), opts.MaxAttempts)
			}
		})
	}
}

// Retry-After as seconds, as an HTTP date, negative, garbage and ten years: the next
// attempt waits at least what the sink asked (capped by backoff.max), and a value that
// is not a delay is ignored.
func TestRetryAfterForms(t *testing.T) {
	for _, tc := range []struct {
		name     string
		value    func() string
		min, max time.Duration
	}{
		{"seconds", func() string { return "1" }, time.Second, 2 * time.Second},
		{"http date", func() string { return time.Now().Add(2 * time.Second).UTC().Format(http.TimeFormat) }, time.Second, 2500 * time.Millisecond},
		{"negative", func() string { return "-5" }, 0, 500 * time.Millisecond},
		{"garbage", func() string { return "soon" }, 0, 500 * time.Millisecond},
		{"longer than backoff.max", func() string { return "3" }, 3 * time.Second, 4 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := newTestDB(t)
			ids := db.insert(t, outboxRow{Entity: "ord_1", Seq: 0})
			var mu sync.Mutex
			var at []time.Time
			s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				mu.Lock()
				at = append(at, time.Now())
				n := len(at)
				mu.Unlock()
				if n == 1 {
					w.Header().Set("Retry-After", tc.value())
					w.WriteHeader(http.StatusTooManyRequests)
				}
			}))
			t.Cleanup(s.Close)
			opts := db.options(t, s.URL)
			opts.BackoffInitial, opts.BackoffMax = 20*time.Millisecond, 2*time.Second
			opts.Random = func() float64 { return 0 }
			start(t, db.pool, opts)
			testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "delivered on the second attempt", func() bool { return db.state(t, ids[0]).Delivered })
			mu.Lock()
			defer mu.Unlock()
			if len(at) != 2 {
				t.Fatalf("%d requests, want 2", len(at))
			}
			if gap := at[1].Sub(at[0]); gap < tc.min || gap > tc.max {
				t.Errorf("Retry-After %s: next attempt after %s, want between %s and %s", tc.name, gap, tc.min, tc.max)
			}
		})
	}
}

// A delay-seconds value too large for int64 is still a (huge) delay, not "no
// Retry-After": RFC 9110 delay-seconds is any run of digits, and a sink asking for
// more than hookkeeper caps must get the cap, not an immediate retry.
func TestRetryAfterOverflowingSecondsIsTheCap(t *testing.T) {
	if got := parseRetryAfter("99999999999999999999", time.Now()); got < 24*time.Hour {
		t.Errorf("Retry-After 99999999999999999999 read as %s, want the 24h cap", got)
	}
}

// docs/concepts.md: the dispatcher "honour[s] the sink's Retry-After". A rate-limiting
// sink answers every row 429 with Retry-After: 3. Those answers count as "unavailable",
// so after SinkDownAfter of them the sink is down and the attempts are given back. The
// rows must still not be due before the 3 s the sink asked for: the probe, due
// BackoffInitial later, must not re-send one early.
func TestRateLimitedSinkRetryAfterSurvivesTheOutage(t *testing.T) {
	db := newTestDB(t)
	var rows []outboxRow
	for i := range 5 {
		rows = append(rows, outboxRow{Entity: "ord_" + string(rune('a'+i)), Seq: 0})
	}
	db.insert(t, rows...)
	var mu sync.Mutex
	last := map[string]time.Time{}
	var early []string
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, now := r.Header.Get(HeaderIdempotencyKey), time.Now()
		mu.Lock()
		if prev, ok := last[key]; ok && now.Sub(prev) < 3*time.Second {
			early = append(early, key+" after "+now.Sub(prev).Round(time.Millisecond).String())
		}
		last[key] = now
		mu.Unlock()
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	t.Cleanup(s.Close)
	opts := db.options(t, s.URL)
	opts.BackoffInitial, opts.BackoffMax = 20*time.Millisecond, 10*time.Second
	_, stop := start(t, db.pool, opts)
	err := testsupport.Poll(t.Context(), 2500*time.Millisecond, 20*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(early) > 0 {
			return nil
		}
		return errors.New("no early re-send yet")
	})
	stop()
	// The scenario happened: every row was answered 429 and the sink was held down.
	if h, herr := ReadSinkHealth(t.Context(), db.pool, db.tables, testEndpoint); herr != nil || !h.Down {
		t.Errorf("sink health %+v, %v: want down after the 429s", h, herr)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(last) != len(rows) {
		t.Errorf("%d of %d rows reached the sink", len(last), len(rows))
	}
	if err == nil {
		t.Errorf("rows re-sent before the 3 s Retry-After of their 429: %v", early)
	}
}
