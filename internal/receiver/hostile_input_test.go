package receiver_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

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
