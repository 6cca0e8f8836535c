package receiver_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

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
