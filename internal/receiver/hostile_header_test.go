package receiver_test

import (
	"net/http"
	"testing"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

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
