package receiver_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

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
