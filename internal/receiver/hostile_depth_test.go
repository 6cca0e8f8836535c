package receiver_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

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
