package receiver_test

import (
	"net/http"
	"testing"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

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
