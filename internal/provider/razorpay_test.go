package provider

import (
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// Razorpay signs nothing but the body and its body has no event id: the id is the body
// digest, so a replay under another (unsigned) X-Razorpay-Event-Id is a duplicate.
func TestRazorpayPresets(t *testing.T) {
	v := vectorNamed(t, "razorpay-sdk-python")
	want := presetValues{
		ID:         signature.BodyDigest([]byte(v.Body)),
		Type:       "payment.authorized",
		EntityKey:  "order_100000000order",
		Amount:     presetPtr[int64](1000000),
		OccurredAt: presetPtr(time.Unix(1400826760, 0)),
	}
	expectPresetValues(t, presetsOverSignedVector(t, v.Name, nil), want)
	replayed := presetsOverSignedVector(t, v.Name, map[string]string{"x-razorpay-event-id": "EvReplay0000000001"})
	expectPresetValues(t, replayed, want)
}

// The Netbanking payment.captured sample of Razorpay's docs, as the SDK-checked vector.
func TestRazorpayPresetsOnDocsSample(t *testing.T) {
	v := vectorNamed(t, "razorpay-sdk-go")
	expectPresetValues(t, presetsOverSignedVector(t, v.Name, nil), presetValues{
		ID:         signature.BodyDigest([]byte(v.Body)),
		Type:       "payment.captured",
		EntityKey:  "order_DESlLckIVRkHWj",
		Amount:     presetPtr[int64](100),
		OccurredAt: presetPtr(time.Unix(1567674606, 0)),
	})
}
