package receiver_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
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
	"github.com/hookkeeper/hookkeeper/internal/demo"
	"github.com/hookkeeper/hookkeeper/internal/metrics"
	"github.com/hookkeeper/hookkeeper/internal/receiver"
	"github.com/hookkeeper/hookkeeper/internal/statemachine"
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

// Hostile requests at the wire: repeated or malformed signature headers, encodings,
// nesting, numbers and times an attacker or a broken sender chooses, and Adyen batches
// with a repeated or forged item. Each stores nothing it should not, and answers clearly.

// TestHostileStripeDeliveriesStoreNothing: deliveries an attacker can shape around one
// authentic Stripe event (or a body the attacker signs nothing of) are refused with a
// clear 4xx, and no row is written; the authentic event is recorded afterwards.
func TestHostileStripeDeliveriesStoreNothing(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderStripe})
	body := stripeEvent("evt_real", "o1", 1)
	now := time.Now()
	sig := demo.StripeSignature(stripeSecret, body, now)
	ts := fmt.Sprint(now.Unix())
	mac := strings.TrimPrefix(sig, "t="+ts+",v1=")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(body)
	_ = zw.Close()
	bom := append([]byte("\xef\xbb\xbf"), body...)
	trailing := append(append([]byte{}, body...), []byte(`{"id":"evt_smuggled"}`)...)
	nested := []byte(strings.Repeat(`{"a":`, 20000) + "1" + strings.Repeat("}", 20000))

	cases := []struct {
		name   string
		body   []byte
		header http.Header
		want   int
	}{
		{"two Stripe-Signature headers, forged first", body, http.Header{"Stripe-Signature": {"t=" + ts + ",v1=" + strings.Repeat("0", 64), sig}}, 401},
		{"two Stripe-Signature headers, forged last", body, http.Header{"Stripe-Signature": {sig, "t=" + ts + ",v1=" + strings.Repeat("0", 64)}}, 401},
		{"two timestamps in one header", body, http.Header{"Stripe-Signature": {"t=1,t=" + ts + ",v1=" + mac}}, 401},
		{"timestamp overflows int64", body, http.Header{"Stripe-Signature": {"t=99999999999999999999999,v1=" + mac}}, 401},
		{"negative timestamp", body, http.Header{"Stripe-Signature": {"t=-" + ts + ",v1=" + mac}}, 401},
		{"timestamp one hour ahead", body, stripeHeaderAt(body, now.Add(time.Hour)), 401},
		{"timestamp one hour old", body, stripeHeaderAt(body, now.Add(-time.Hour)), 401},
		{"signature of another secret", body, http.Header{"Stripe-Signature": {demo.StripeSignature("whsec_other", body, now)}}, 401},
		{"gzip body signed compressed", gz.Bytes(), http.Header{"Content-Encoding": {"gzip"}, "Stripe-Signature": {demo.StripeSignature(stripeSecret, gz.Bytes(), now)}}, 400},
		{"gzip header on a body signed compressed, plain body sent", body, http.Header{"Content-Encoding": {"gzip"}, "Stripe-Signature": {demo.StripeSignature(stripeSecret, gz.Bytes(), now)}}, 401},
		{"BOM before the JSON, signed", bom, stripeHeader(stripeSecret, bom), 400},
		{"a second JSON value after the event, signed", trailing, stripeHeader(stripeSecret, trailing), 400},
		{"empty body, signed", []byte{}, stripeHeader(stripeSecret, []byte{}), 400},
		{"nested 20,000 deep, signed", nested, stripeHeader(stripeSecret, nested), 400},
	}
	for _, c := range cases {
		h := c.header.Clone()
		if h.Get("Content-Type") == "" {
			h.Set("Content-Type", "application/json")
		}
		r := f.post("/hooks", c.body, h)
		if r.code != c.want {
			t.Errorf("%s: %d %q, want %d", c.name, r.code, r.body, c.want)
		}
		if strings.Contains(r.body, stripeSecret) || strings.Contains(strings.ToLower(r.body), "sql") {
			t.Errorf("%s: the answer leaks internals: %q", c.name, r.body)
		}
	}
	f.assertNothingStored()
	if r := f.post("/hooks", body, stripeHeader(stripeSecret, body)); r.code != http.StatusOK {
		t.Fatalf("authentic delivery afterwards: %d %q", r.code, r.body)
	}
	if ids := f.eventIDs(); fmt.Sprint(ids) != "[evt_real]" {
		t.Fatalf("receipts %v, want [evt_real]", ids)
	}
}

func stripeHeaderAt(body []byte, at time.Time) http.Header {
	return http.Header{"Stripe-Signature": {demo.StripeSignature(stripeSecret, body, at)}}
}

// TestUnsignedHeaderWithInvalidUTF8IsNoReasonToFail: the kept headers are stored with
// the event; an attacker-added header whose value is not UTF-8 (HTTP allows obs-text)
// must not turn an authentic delivery into a 503 on every retry.
func TestUnsignedHeaderWithInvalidUTF8IsNoReasonToFail(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderStripe})
	body := stripeEvent("evt_hdr", "o1", 1)
	h := stripeHeader(stripeSecret, body)
	h.Set("X-Note", "caf\xe9 \xff\xfe")
	if r := f.post("/hooks", body, h); r.code != http.StatusOK {
		t.Fatalf("delivery with a Latin-1 header: %d %q, want 200", r.code, r.body)
	}
}

// TestSignedEventNestedDeeplyIsNot503: a signed event nested as deep as Go's decoder
// allows must get a clear answer, never a 503 on every retry.
func TestSignedEventNestedDeeplyIsNot503(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderStripe, maxBodyBytes: 1 << 20})
	for i, depth := range []int{1000, 9990} {
		body := fmt.Appendf(nil, `{"id":"evt_deep%d","type":"payment_intent.succeeded","created":%d,`+
			`"data":{"object":{"id":"pi_1","amount":1,"metadata":{"client_txn_id":"o1"}}},"x":%s1%s}`,
			i, time.Now().Unix(), strings.Repeat(`[`, depth), strings.Repeat(`]`, depth))
		r := f.post("/hooks", body, stripeHeader(stripeSecret, body))
		if r.code != http.StatusOK && r.code/100 != 4 {
			t.Errorf("depth %d: %d %q, want 200 or a 4xx", depth, r.code, r.body)
		}
	}
}

// TestSignedEventWithAHugeNumber: numbers Go parses but jsonb's numeric cannot hold (more
// than 131072 digits before the point, or 16383 after it) used to fail the transaction,
// a 503 on every retry. They are refused as unstorable (422); numbers at the bounds are
// recorded.
func TestSignedEventWithAHugeNumber(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderStripe})
	cases := []struct {
		n    string
		want int
	}{
		{"1e200000", 422}, {"1e-200000", 422}, {"-1e131072", 422}, {"1e131072", 422}, {"123e131070", 422},
		{"1.5e-16383", 422}, {"0e-20000", 422}, {"0.00e-16382", 422}, {"1e99999999999999999999", 422},
		{"1e131071", 200}, {"123e131069", 200}, {"1e-16383", 200}, {"1.5e-16382", 200}, {"0e200000", 200},
		{"123456789012345678901234567890", 200}, {"-0", 200}, {"1E+400", 200}, {"0.5", 200},
	}
	for i, c := range cases {
		body := fmt.Appendf(nil, `{"id":"evt_n%d","type":"payment_intent.succeeded","created":%d,`+
			`"data":{"object":{"id":"pi_1","amount":%s,"metadata":{"client_txn_id":"o1"}}}}`, i, time.Now().Unix(), c.n)
		if r := f.post("/hooks", body, stripeHeader(stripeSecret, body)); r.code != c.want {
			t.Errorf("amount %s: %d %q, want %d", c.n, r.code, r.body, c.want)
		}
	}
}

// TestSignedEventWithAnUnrepresentableTimeIsRecorded: a signed event whose created is a
// time PostgreSQL cannot store (before 4713 BC, or a double far past int64) must not
// fail its transaction with a 503 on every retry; the time is not believed, and the
// event is recorded without one.
func TestSignedEventWithAnUnrepresentableTimeIsRecorded(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderStripe})
	for id, created := range map[string]string{
		"evt_ancient":     "-999999999999",
		"evt_min":         "-9223372036854775808",
		"evt_max":         "9223372036854775807",
		"evt_max_less":    "9223372036000000000",
		"evt_huge_double": "1e300",
		"evt_neg_double":  "-1e300",
	} {
		body := []byte(`{"id":"` + id + `","type":"payment_intent.succeeded","created":` + created + `,` +
			`"data":{"object":{"id":"pi_1","amount":1,"metadata":{"client_txn_id":"o-` + id + `"}}}}`)
		if r := f.post("/hooks", body, stripeHeader(stripeSecret, body)); r.code != http.StatusOK {
			t.Errorf("created %s: %d %q, want 200", created, r.code, r.body)
		}
	}
	rows := f.rows()
	if n := rows.Count(t, rows.Tables.Events, "occurred_at IS NOT NULL"); n != 0 {
		t.Errorf("%d receipts keep an unrepresentable time, want 0", n)
	}
}

// TestAdyenBatchWithTheSameItemTwiceRecordsItOnce: Adyen may repeat an item within one
// notification; both copies are authentic, so the delivery is acknowledged and the
// event stored once, not a 503 the provider retries forever.
func TestAdyenBatchWithTheSameItemTwiceRecordsItOnce(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderAdyen})
	item := adyenItem(t, "PSP0001", "order-1", 1000)
	body := []byte(`{"live":"false","notificationItems":[` + item + `,` + item + `]}`)
	r := f.post("/hooks", body, http.Header{"Content-Type": {"application/json"}})
	if r.code != http.StatusOK || r.body != "[accepted]" {
		t.Fatalf("batch with a repeated item: %d %q, want 200 [accepted]", r.code, r.body)
	}
	if ids := f.eventIDs(); fmt.Sprint(ids) != "[PSP0001:AUTHORISATION:true]" {
		t.Fatalf("receipts %v, want one", ids)
	}
}

// TestAdyenBatchWithOneForgedItemStoresNothing: one authentic item and one whose
// hmacSignature is another item's; the whole notification is refused.
func TestAdyenBatchWithOneForgedItemStoresNothing(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderAdyen})
	good := adyenItem(t, "PSP0001", "order-1", 1000)
	// Same signature, other amount: the signature no longer covers the item.
	forged := strings.Replace(adyenItem(t, "PSP0002", "order-2", 1000), `"value":1000`, `"value":1`, 1)
	if forged == adyenItem(t, "PSP0002", "order-2", 1000) {
		t.Fatal("forgery did not change the item")
	}
	body := []byte(`{"live":"false","notificationItems":[` + good + `,` + forged + `]}`)
	if r := f.post("/hooks", body, http.Header{"Content-Type": {"application/json"}}); r.code != http.StatusUnauthorized {
		t.Fatalf("batch with a forged item: %d %q, want 401", r.code, r.body)
	}
	f.assertNothingStored()
}

// TestSignedBodyWithDuplicateKeysIsRefused: a body signed as it is (the signature holds
// on the raw bytes) but with the id or type member twice must not be recorded: one
// parser takes the first, encoding/json the last, so the id deduped and the type routed
// could differ from what a later reader of the stored body sees, and jsonb would store
// a document the provider did not sign. It is refused as unstorable (422).
func TestSignedBodyWithDuplicateKeysIsRefused(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderStripe})
	created := time.Now().Unix()
	bodies := map[string][]byte{
		"two ids": fmt.Appendf(nil, `{"id":"evt_a","id":"evt_b","type":"payment_intent.succeeded","created":%d,`+
			`"data":{"object":{"id":"pi_1","amount":1,"metadata":{"client_txn_id":"o1"}}}}`, created),
		"two types": fmt.Appendf(nil, `{"id":"evt_c","type":"payment_intent.succeeded","type":"charge.refunded","created":%d,`+
			`"data":{"object":{"id":"pi_1","amount":1,"metadata":{"client_txn_id":"o1"}}}}`, created),
		"the id twice, once escaped": fmt.Appendf(nil, `{"id":"evt_e","\u0069d":"evt_f","type":"payment_intent.succeeded","created":%d,`+
			`"data":{"object":{"id":"pi_1","amount":1,"metadata":{"client_txn_id":"o1"}}}}`, created),
		"two entity keys": fmt.Appendf(nil, `{"id":"evt_d","type":"payment_intent.succeeded","created":%d,`+
			`"data":{"object":{"id":"pi_1","amount":1,"metadata":{"client_txn_id":"o1","client_txn_id":"o2"}}}}`, created),
	}
	for name, body := range bodies {
		if r := f.post("/hooks", body, stripeHeader(stripeSecret, body)); r.code != http.StatusUnprocessableEntity {
			t.Errorf("%s: %d %q, want 422", name, r.code, r.body)
		}
	}
	f.assertNothingStored()
	// Equal keys in different objects, and keys that differ only in case, are fine.
	ok := fmt.Appendf(nil, `{"id":"evt_ok","ID":"x","type":"payment_intent.succeeded","created":%d,`+
		`"data":{"object":{"id":"pi_1","amount":1,"metadata":{"client_txn_id":"o1"}}}}`, created)
	if r := f.post("/hooks", ok, stripeHeader(stripeSecret, ok)); r.code != http.StatusOK {
		t.Fatalf("clean event: %d %q", r.code, r.body)
	}
}

// TestAdyenSmuggledFormPayloadIsNotRecorded is issue 13 item 1 as an attacker sends it:
// a form Content-Type on a JSON Adyen notification that holds one authentic item and a
// string member carrying "&payload=<url-encoded forged notification>&". Before the fix
// the receiver answered [accepted] and stored a receipt for the forged pspReference.
func TestAdyenSmuggledFormPayloadIsNotRecorded(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderAdyen})
	forged := `{"live":"false","notificationItems":[{"NotificationRequestItem":{"additionalData":{"hmacSignature":"AAAA"},` +
		`"amount":{"currency":"EUR","value":1},"eventCode":"AUTHORISATION","merchantAccountCode":"ShopAccount",` +
		`"merchantReference":"order-victim","pspReference":"FORGED","success":"true"}}]}`
	body := []byte(`{"live":"false","note":"&payload=` + url.QueryEscape(forged) + `&","notificationItems":[` +
		adyenItem(t, "PSP0001", "order-1", 1000) + `]}`)

	r := f.post("/hooks", body, http.Header{"Content-Type": {"application/x-www-form-urlencoded"}})
	if r.code != http.StatusOK || r.body != "[accepted]" {
		t.Fatalf("delivery: %d %q, want 200 [accepted] for the authentic item", r.code, r.body)
	}
	ids := f.eventIDs()
	if fmt.Sprint(ids) != "[PSP0001:AUTHORISATION:true]" {
		t.Fatalf("receipts %v, want only the authentic PSP0001 (never FORGED)", ids)
	}
}

// TestUnstorableSignedEventIs422AndCounted is issue 13 item 9: a signed event whose
// JSON holds \u0000 (jsonb refuses it) or whose id is not UTF-8 (text refuses it) used
// to fail its transaction with a 503 on every retry. It is refused with 422, counted as
// outcome "unstorable", and nothing is stored; the database is never asked.
func TestUnstorableSignedEventIs422AndCounted(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderStripe})
	created := time.Now().Unix()
	bodies := map[string][]byte{
		"NUL escape in a string": fmt.Appendf(nil, `{"id":"evt_nul","type":"payment_intent.succeeded","created":%d,`+
			`"data":{"object":{"id":"pi_1","description":"a\u0000b","metadata":{"client_txn_id":"o1"}}}}`, created),
		"id not UTF-8": fmt.Appendf(nil, "{\"id\":\"evt_\xff\xfe\",\"type\":\"payment_intent.succeeded\",\"created\":%d,"+
			"\"data\":{\"object\":{\"id\":\"pi_1\",\"metadata\":{\"client_txn_id\":\"o1\"}}}}", created),
		// Longer than a btree index entry may be, and incompressible.
		"id of 4,000 bytes": fmt.Appendf(nil, `{"id":"evt_%s","type":"payment_intent.succeeded","created":%d,`+
			`"data":{"object":{"id":"pi_1","metadata":{"client_txn_id":"o1"}}}}`, randomText(t, 4000), created),
		"entity key of 4,000 bytes": fmt.Appendf(nil, `{"id":"evt_long_key","type":"payment_intent.succeeded","created":%d,`+
			`"data":{"object":{"id":"pi_1","metadata":{"client_txn_id":"%s"}}}}`, created, randomText(t, 4000)),
	}
	for name, body := range bodies {
		r := f.post("/hooks", body, stripeHeader(stripeSecret, body))
		if r.code != http.StatusUnprocessableEntity {
			t.Errorf("%s: %d %q, want 422", name, r.code, r.body)
		}
		if r.header.Get("Retry-After") != "" {
			t.Errorf("%s: Retry-After %q on a 422", name, r.header.Get("Retry-After"))
		}
	}
	f.assertNothingStored()
	if n := f.requests("422", "unstorable"); n != float64(len(bodies)) {
		t.Errorf("requests{422,unstorable} = %v, want %d", n, len(bodies))
	}
	if n := f.requests("503", "error"); n != 0 {
		t.Errorf("requests{503,error} = %v, want 0", n)
	}
	// The same endpoint still records a clean event.
	ok := stripeEvent("evt_ok", "o1", 1)
	if r := f.post("/hooks", ok, stripeHeader(stripeSecret, ok)); r.code != http.StatusOK {
		t.Fatalf("clean event: %d %q", r.code, r.body)
	}
}

func githubHeader(t *testing.T, body []byte, delivery, event string) http.Header {
	return signedHeader(t, v1alpha1.ProviderGitHub, body, http.Header{"X-Github-Delivery": {delivery}, "X-Github-Event": {event}})
}

// TestGitHubReplayWithNewUnsignedHeadersIsADuplicate is issue 13 item 2: a captured
// GitHub delivery replayed with a new X-GitHub-Delivery and another X-GitHub-Event is a
// duplicate of the original, not a new event that could drive another transition.
func TestGitHubReplayWithNewUnsignedHeadersIsADuplicate(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderGitHub})
	body := []byte(`{"action":"closed","pull_request":{"html_url":"https://github.com/o/r/pull/1","merged":true},"repository":{"full_name":"o/r"}}`)
	first := f.post("/hooks", body, githubHeader(t, body, "d-1", "pull_request"))
	if first.code != http.StatusOK || !strings.Contains(first.body, `"duplicate":false`) {
		t.Fatalf("first delivery: %d %q", first.code, first.body)
	}
	for _, h := range []http.Header{
		githubHeader(t, body, "d-2", "pull_request"),
		githubHeader(t, body, "d-3", "issues"),
	} {
		r := f.post("/hooks", body, h)
		if r.code != http.StatusOK || !strings.Contains(r.body, `"duplicate":true`) {
			t.Errorf("replay with X-GitHub-Delivery %s, X-GitHub-Event %s: %d %q, want a duplicate",
				h.Get("X-Github-Delivery"), h.Get("X-Github-Event"), r.code, r.body)
		}
	}
	if got := f.rowCounts()["events"]; got != 1 {
		t.Errorf("receipts = %d, want 1", got)
	}
}

// TestFutureOccurredAtDoesNotMoveTheEntityClock: an event claiming to have happened in
// 2099 is recorded without a time, so it cannot make every genuine later event stale.
func TestFutureOccurredAtDoesNotMoveTheEntityClock(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderStripe})
	future := time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	body := fmt.Appendf(nil, `{"id":"evt_future","type":"payment_intent.succeeded","created":%d,`+
		`"data":{"object":{"id":"pi_1","amount":5,"metadata":{"client_txn_id":"o-future"}}}}`, future)
	if r := f.post("/hooks", body, stripeHeader(stripeSecret, body)); r.code != http.StatusOK {
		t.Fatalf("delivery: %d %q", r.code, r.body)
	}
	var occurred, clock *time.Time
	if err := f.admin.QueryRow(context.Background(),
		`SELECT occurred_at FROM hookkeeper.webhook_events WHERE event_id = 'evt_future'`).Scan(&occurred); err != nil {
		t.Fatal(err)
	}
	if occurred != nil {
		t.Errorf("occurred_at = %v, want NULL", occurred)
	}
	if err := f.admin.QueryRow(context.Background(),
		`SELECT max(last_event_at) FROM hookkeeper.entities`).Scan(&clock); err != nil {
		t.Fatal(err)
	}
	if clock != nil && clock.Year() >= 2099 {
		t.Errorf("entity clock moved to %v", clock)
	}
}

func shopifyHeader(t *testing.T, body []byte, webhookID, topic, triggeredAt string) http.Header {
	return signedHeader(t, v1alpha1.ProviderShopify, body, http.Header{
		"X-Shopify-Webhook-Id": {webhookID}, "X-Shopify-Topic": {topic}, "X-Shopify-Triggered-At": {triggeredAt}})
}

// TestShopifyReplayWithNewWebhookIDAndTimeIsADuplicate is issue 13 item 2 for Shopify:
// the captured body replayed with a new X-Shopify-Webhook-Id and a Triggered-At in
// 2099 is a duplicate, and no stored time comes from the unsigned header.
func TestShopifyReplayWithNewWebhookIDAndTimeIsADuplicate(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderShopify})
	body := []byte(`{"id":820982911946154508,"financial_status":"paid","updated_at":"2026-03-01T12:00:00Z"}`)
	now := time.Now().UTC().Format(time.RFC3339)
	first := f.post("/hooks", body, shopifyHeader(t, body, "w-1", "orders/paid", now))
	if first.code != http.StatusOK || !strings.Contains(first.body, `"duplicate":false`) {
		t.Fatalf("first delivery: %d %q", first.code, first.body)
	}
	replay := f.post("/hooks", body, shopifyHeader(t, body, "w-2", "orders/paid", "2099-01-01T00:00:00Z"))
	if replay.code != http.StatusOK || !strings.Contains(replay.body, `"duplicate":true`) {
		t.Fatalf("replay with a new webhook id and Triggered-At: %d %q, want a duplicate", replay.code, replay.body)
	}
	rows := f.rows()
	n := rows.Count(t, rows.Tables.Events, "occurred_at > now() + interval '1 hour'")
	if got := f.rowCounts()["events"]; got != 1 || n != 0 {
		t.Errorf("receipts = %d (want 1), with a future occurred_at = %d (want 0)", got, n)
	}
}

// TestShopifySampleRefusesABodyReplayedUnderAnotherTopic: Shopify signs the body and
// not X-Shopify-Topic, so a captured body replayed under another topic is a new event of
// that topic (the topic is part of the id). The shipped sample must not let such a
// replay move an order: a paid order's body under orders/cancelled or refunds/create,
// and a cancelled order's body under orders/paid, change no state and emit nothing,
// while the genuine deliveries of those topics still apply.
func TestShopifySampleRefusesABodyReplayedUnderAnotherTopic(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderShopify, sample: "hookkeeper_v1alpha1_webhookendpoint_shopify.yaml"})
	paid := []byte(`{"id":5551,"financial_status":"paid","cancelled_at":null,"updated_at":"2026-03-01T12:00:00Z"}`)
	refund := []byte(`{"id":77,"order_id":5551,"created_at":"2026-03-01T13:00:00Z","transactions":[{"kind":"refund","status":"success"}]}`)
	cancelled := []byte(`{"id":5552,"financial_status":"voided","cancelled_at":"2026-03-01T12:30:00Z","updated_at":"2026-03-01T12:30:00Z"}`)
	now := time.Now().UTC().Format(time.RFC3339)
	for i, d := range []struct {
		body  []byte
		topic string
	}{
		{paid, "orders/paid"},
		{paid, "orders/cancelled"}, // replays
		{paid, "refunds/create"},
		{cancelled, "orders/paid"},
		{refund, "refunds/create"}, // genuine
		{cancelled, "orders/cancelled"},
	} {
		r := f.post("/hooks", d.body, shopifyHeader(t, d.body, fmt.Sprintf("w-%d", i), d.topic, now))
		if r.code != http.StatusOK || !strings.Contains(r.body, `"duplicate":false`) {
			t.Fatalf("delivery %d (%s): %d %q", i, d.topic, r.code, r.body)
		}
	}
	rows := f.rows()
	for state, want := range map[string]int{"paid": 0, "refunded": 1, "cancelled": 1, "pending": 0} {
		if got := rows.EntitiesInState(t, state); got != want {
			t.Errorf("orders %s: %d, want %d", state, got, want)
		}
	}
	if got := rows.ReceiptsWithOutcome(t, statemachine.GuardFailed); got != 3 {
		t.Errorf("receipts guard_failed: %d, want the 3 replays", got)
	}
	if got := rows.Outbox(t); got != 3 {
		t.Errorf("outbox rows: %d, want 3 (order.paid, order.refunded, order.cancelled)", got)
	}
}

// TestBodyCutOffMidwayStoresNothing: a sender (or a proxy) that announces a body and
// closes the connection halfway. The half it sent is a prefix of an authentically signed
// event; nothing of it may be stored, and the whole event, delivered again, is recorded
// once, not taken for a duplicate of a half.
func TestBodyCutOffMidwayStoresNothing(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderStripe})
	body := stripeEvent("evt_cut", "order-1", 1000)
	header := stripeHeader(stripeSecret, body)

	u, err := url.Parse(f.base)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	var req strings.Builder
	fmt.Fprintf(&req, "POST /hooks HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", u.Host, len(body))
	for k, vs := range header {
		for _, v := range vs {
			fmt.Fprintf(&req, "%s: %s\r\n", k, v)
		}
	}
	req.WriteString("\r\n")
	req.Write(body[:len(body)/2])
	if _, err := conn.Write([]byte(req.String())); err != nil {
		t.Fatal(err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	answer, _ := io.ReadAll(conn) // the receiver answers 400 or just closes; both are fine
	if strings.HasPrefix(string(answer), "HTTP/1.1 2") {
		t.Fatalf("a body cut off midway was acknowledged: %q", answer)
	}
	f.assertNothingStored()

	r := f.post("/hooks", body, header)
	if r.code != http.StatusOK || !strings.Contains(r.body, `"duplicate":false`) {
		t.Fatalf("the whole event afterwards: %d %q, want it recorded", r.code, r.body)
	}
	if got := f.rowCounts()["events"]; got != 1 {
		t.Fatalf("receipts = %d, want 1", got)
	}
}

// randomText is n bytes of random URL-safe base64: text no compression shortens.
func randomText(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)[:n]
}
