package provider

import (
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// Paystack's envelope has no event id and no header is signed: the id is the digest of
// the signed body, whatever headers a replay carries.
func TestPaystackPresets(t *testing.T) {
	v := vectorNamed(t, "paystack-computed")
	want := presetValues{
		ID:         signature.BodyDigest([]byte(v.Body)),
		Type:       "charge.success",
		EntityKey:  "uybxnzf71231",
		Amount:     presetPtr[int64](1000),
		OccurredAt: presetPtr(time.Date(2025, 6, 21, 11, 11, 27, 0, time.UTC)),
	}
	expectPresetValues(t, presetsOverSignedVector(t, v.Name, nil), want)
	expectPresetValues(t, presetsOverSignedVector(t, v.Name, map[string]string{"x-request-id": "replayed"}), want)
}
