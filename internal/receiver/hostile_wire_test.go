package receiver_test

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
