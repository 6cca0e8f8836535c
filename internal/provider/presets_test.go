package provider

import (
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// bodyDigestID stands in a presetCase for the id a provider without an event id reads:
// the digest of the vector's signed body.
const bodyDigestID = "(the digest of the signed body)"

// TestPresetsOverVectors: what the presets of providers whose events are plain JSON
// documents read from their vectors. replay are unsigned headers a replay may carry
// with other values: they change nothing the presets read.
func TestPresetsOverVectors(t *testing.T) {
	for _, tc := range []struct {
		vector string
		replay map[string]string
		want   presetValues
	}{
		{vector: "intercom-computed", want: presetValues{
			ID: "notif_78c122d0-23ba-11e4-9464-79b01267cc2e", Type: "conversation.user.created", EntityKey: "147",
			OccurredAt: presetPtr(time.Unix(1772366401, 0)),
		}},
		// Vercel's createdAt is in milliseconds; the preset turns it into seconds.
		{vector: "vercel-computed", want: presetValues{
			ID: "uQ6c2a8ZSeKMcbWAaKTwZLsH", Type: "deployment.succeeded", EntityKey: "dpl_2qDB8PqGKhnyUFCiVLwLiL5dJGzD",
			OccurredAt: presetPtr(time.Unix(1772366400, 0)),
		}},
		{vector: "typeform-computed", want: presetValues{
			ID: "01KJMB6Y6N3Q8Z1T5V7W9X2Y4Z", Type: "form_response", EntityKey: "a3a12ec67a1365927098a606107fac15",
			OccurredAt: presetPtr(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)),
		}},
		// Paystack's envelope has no event id and no header is signed: the id is the
		// digest of the signed body, whatever headers a replay carries.
		{vector: "paystack-computed", replay: map[string]string{"x-request-id": "replayed"}, want: presetValues{
			ID: bodyDigestID, Type: "charge.success", EntityKey: "uybxnzf71231",
			Amount: presetPtr[int64](1000), OccurredAt: presetPtr(time.Date(2025, 6, 21, 11, 11, 27, 0, time.UTC)),
		}},
		// Razorpay signs nothing but the body and its body has no event id: the id is the
		// body digest, so a replay under another (unsigned) X-Razorpay-Event-Id is a
		// duplicate.
		{vector: "razorpay-sdk-python", replay: map[string]string{"x-razorpay-event-id": "EvReplay0000000001"}, want: presetValues{
			ID: bodyDigestID, Type: "payment.authorized", EntityKey: "order_100000000order",
			Amount: presetPtr[int64](1000000), OccurredAt: presetPtr(time.Unix(1400826760, 0)),
		}},
		// The Netbanking payment.captured sample of Razorpay's docs, as the SDK-checked
		// vector.
		{vector: "razorpay-sdk-go", want: presetValues{
			ID: bodyDigestID, Type: "payment.captured", EntityKey: "order_DESlLckIVRkHWj",
			Amount: presetPtr[int64](100), OccurredAt: presetPtr(time.Unix(1567674606, 0)),
		}},
	} {
		t.Run(tc.vector, func(t *testing.T) {
			want := tc.want
			if want.ID == bodyDigestID {
				want.ID = signature.BodyDigest([]byte(vectorNamed(t, tc.vector).Body))
			}
			expectPresetValues(t, presetsOverSignedVector(t, tc.vector, nil), want)
			if tc.replay != nil {
				expectPresetValues(t, presetsOverSignedVector(t, tc.vector, tc.replay), want)
			}
		})
	}
}
