package receiver_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/metrics"
	"github.com/hookkeeper/hookkeeper/internal/receiver"
	"github.com/hookkeeper/hookkeeper/internal/store"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// A flood of forged requests is counted in full, but logged only for the first of each
// reason and then at most once a second, with how many lines were left out.
func TestRejectionLogsAreRateLimitedAndCountersExact(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderStripe})
	metrics.RejectionLogsSuppressed.DeletePartialMatch(prometheus.Labels{metrics.LabelEndpoint: f.ep.Key()})
	body := stripeEvent("evt_flood", "ord-1", 4999)
	forged := stripeHeader("whsec_someone_else", body)
	const flood = 200
	began := time.Now()
	for range flood {
		if r := f.post("/hooks", body, forged); r.code != http.StatusUnauthorized {
			t.Fatalf("forged signature: %d %q, want 401", r.code, r.body)
		}
	}
	took := time.Since(began)

	if n := testutil.ToFloat64(metrics.SignatureFailures.WithLabelValues(f.ep.Key(), "mismatch")); n != flood {
		t.Errorf("signature failures{mismatch} = %v, want %d", n, flood)
	}
	if n := f.requests("401", "rejected"); n != flood {
		t.Errorf("requests{401,rejected} = %v, want %d", n, flood)
	}
	logged := strings.Count(f.logs.text(), "webhook rejected: signature")
	// The first line, then at most one per second of the flood.
	if most := 1 + int(took/time.Second) + 1; logged < 1 || logged > most {
		t.Errorf("%d rejection lines for %d forged requests in %s, want 1 to %d", logged, flood, took.Round(time.Millisecond), most)
	}
	suppressed := testutil.ToFloat64(metrics.RejectionLogsSuppressed.WithLabelValues(f.ep.Key(), "signature/mismatch"))
	if int(suppressed)+logged != flood {
		t.Errorf("%d lines logged + %v suppressed, want %d in all", logged, suppressed, flood)
	}

	// A later rejection says how many were left out since the previous line.
	withCount := regexp.MustCompile(`webhook rejected: signature.*"suppressed"=(\d+)`)
	testsupport.Eventually(t, 15*time.Second, 20*time.Millisecond, "a rejection line with the suppressed count", func() bool {
		f.post("/hooks", body, forged)
		return withCount.MatchString(f.logs.text())
	})
	total := 0
	for _, m := range withCount.FindAllStringSubmatch(f.logs.text(), -1) {
		n, _ := strconv.Atoi(m[1])
		total += n
	}
	if total == 0 {
		t.Errorf("suppressed counts in the logs add up to 0:\n%s", f.logs.text())
	}
	f.logs.assertNotContains(t, forged.Get("Stripe-Signature"), stripeSecret, string(body))
}

// Beyond maxInFlight, a request gets 503 with Retry-After at once, before its body is
// read, and is counted; a slot that frees up serves the next request.
func TestRequestsBeyondMaxInFlightGet503WithRetryAfter(t *testing.T) {
	pool := openPool(t, testsupport.NewDatabase(t), 2)
	const endpoint = "test/in-flight"
	for _, vec := range []interface {
		DeletePartialMatch(prometheus.Labels) int
	}{metrics.Requests, metrics.Overloaded, metrics.InFlight, metrics.RejectionLogsSuppressed} {
		vec.DeletePartialMatch(prometheus.Labels{metrics.LabelEndpoint: endpoint})
	}

	entered, release := make(chan struct{}, 8), make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	})
	logs := &logBuffer{}
	srv, err := receiver.NewServer(receiver.ServerOptions{
		Webhook: slow, Endpoint: endpoint, MaxInFlight: 2, DB: pool, Gatherer: prometheus.NewRegistry(), Logger: logs.logger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, srv).base + "/"

	var wg sync.WaitGroup
	defer wg.Wait()
	var releaseOnce sync.Once
	defer releaseOnce.Do(func() { close(release) })
	for range 2 {
		wg.Go(func() {
			resp, err := http.Post(url, "application/json", strings.NewReader("{}"))
			if err == nil {
				_ = resp.Body.Close()
			}
		})
	}
	for range 2 {
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the first two requests never reached the handler")
		}
	}

	// The third announces a body it never sends: the answer must not wait for it.
	reqCtx, cancelReq := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelReq()
	req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, url, io.NopCloser(blockingReader{release, reqCtx.Done()}))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = 1 << 20
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("third request: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third request: %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if n := testutil.ToFloat64(metrics.Overloaded.WithLabelValues(endpoint)); n != 1 {
		t.Errorf("overloaded = %v, want 1", n)
	}
	if n := testutil.ToFloat64(metrics.Requests.WithLabelValues(endpoint, "503", "overloaded")); n != 1 {
		t.Errorf("requests{503,overloaded} = %v, want 1", n)
	}
	if n := testutil.ToFloat64(metrics.InFlight.WithLabelValues(endpoint)); n != 2 {
		t.Errorf("in flight = %v, want 2", n)
	}
	logs.assertContains(t, "too many requests in flight")

	releaseOnce.Do(func() { close(release) })
	wg.Wait()
	testsupport.Eventually(t, 15*time.Second, 20*time.Millisecond, "a free slot to serve the next request", func() bool {
		resp, err := http.Post(url, "application/json", strings.NewReader("{}"))
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// blockingReader sends nothing until done is closed (or the request is given up): a
// client that announced a body.
type blockingReader struct{ done, giveUp <-chan struct{} }

func (b blockingReader) Read([]byte) (int, error) {
	select {
	case <-b.done:
		return 0, io.EOF
	case <-b.giveUp:
		return 0, context.DeadlineExceeded
	}
}

// getReadyz waits for /readyz at readyzURL to answer and returns its status and body.
func getReadyz(t *testing.T, readyzURL string) (int, string) {
	t.Helper()
	var code int
	var body []byte
	testsupport.Eventually(t, 15*time.Second, 20*time.Millisecond, "/readyz to answer", func() bool {
		resp, err := http.Get(readyzURL)
		if err != nil {
			return false
		}
		defer func() { _ = resp.Body.Close() }()
		code = resp.StatusCode
		body, _ = io.ReadAll(resp.Body)
		return true
	})
	return code, string(body)
}

// /readyz is unauthenticated: with the database unreachable it answers 503 with a fixed
// text, never the driver's error, which may name the host, the user or the URL.
func TestReadyzHidesTheDatabaseError(t *testing.T) {
	const dbURL = "postgres://hk_user:s3cret-password@127.0.0.1:1/orders_db?connect_timeout=1"
	pool, err := pgxpool.New(context.Background(), dbURL) // connects lazily: no error here
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	srv, err := receiver.NewServer(receiver.ServerOptions{
		Webhook: http.NotFoundHandler(), DB: pool, Gatherer: prometheus.NewRegistry(), Logger: logr.Discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	code, body := getReadyz(t, serve(t, srv).adminURL+"/readyz")
	if code != http.StatusServiceUnavailable || body != "database unreachable\n" {
		t.Fatalf("/readyz %d %q, want 503 %q", code, body, "database unreachable\n")
	}
}

// A receiver whose database lacks the schema, or has an older version of it, is not
// ready, and /readyz says what is missing; once migrated it is ready.
func TestReadyzChecksTheSchemaVersion(t *testing.T) {
	dbURL := testsupport.NewDatabase(t)
	ctx := context.Background()
	pool := openPool(t, dbURL, 2)
	srv, err := receiver.NewServer(receiver.ServerOptions{
		Webhook: http.NotFoundHandler(), DB: pool, Gatherer: prometheus.NewRegistry(), Logger: logr.Discard(),
		Schema: func(ctx context.Context) error { return store.CheckSchema(ctx, pool, schema) },
	})
	if err != nil {
		t.Fatal(err)
	}
	readyzURL := serve(t, srv).adminURL + "/readyz"
	readyz := func() (int, string) { t.Helper(); return getReadyz(t, readyzURL) }

	code, body := readyz()
	if code != http.StatusServiceUnavailable || !strings.Contains(body, `schema "hookkeeper" does not exist`) ||
		!strings.Contains(body, "hookkeeper migrate") {
		t.Errorf("no schema: /readyz %d %q, want 503 naming the missing schema and the fix", code, body)
	}

	if _, err := store.Migrate(ctx, dbURL, schema); err != nil {
		t.Fatal(err)
	}
	if code, body = readyz(); code != http.StatusOK {
		t.Errorf("migrated: /readyz %d %q, want 200", code, body)
	}

	// An older schema: the newest migration not applied.
	if _, err := pool.Exec(ctx, `UPDATE hookkeeper.goose_db_version SET is_applied = false WHERE version_id = $1`, store.SchemaVersion); err != nil {
		t.Fatal(err)
	}
	// The previous version is the newest one left (versions may have gaps).
	var previous int64
	if err := pool.QueryRow(ctx, `SELECT max(version_id) FROM hookkeeper.goose_db_version WHERE is_applied`).Scan(&previous); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`schema "hookkeeper" is at version %d, this receiver needs %d`, previous, store.SchemaVersion)
	if code, body = readyz(); code != http.StatusServiceUnavailable || !strings.Contains(body, want) {
		t.Errorf("older schema: /readyz %d %q, want 503 with %q", code, body, want)
	}

	// A schema without hookkeeper's version table.
	if _, err := pool.Exec(ctx, `DROP TABLE hookkeeper.goose_db_version`); err != nil {
		t.Fatal(err)
	}
	if code, body = readyz(); code != http.StatusServiceUnavailable || !strings.Contains(body, "has no hookkeeper migrations") {
		t.Errorf("no version table: /readyz %d %q, want 503 saying the migrations are missing", code, body)
	}
}
