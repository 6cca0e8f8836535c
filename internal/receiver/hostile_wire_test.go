package receiver_test

// Hostile requests at the wire: repeated or malformed signature headers, encodings,
// nesting, numbers and times an attacker or a broken sender chooses, and Adyen batches
// with a repeated or forged item. Each stores nothing it should not, and answers clearly.

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/demo"
)

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
