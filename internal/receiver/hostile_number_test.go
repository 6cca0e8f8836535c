package receiver_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

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
