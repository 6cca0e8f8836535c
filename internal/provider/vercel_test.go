package provider

import (
	"testing"
	"time"
)

// createdAt is in milliseconds; the preset turns it into seconds.
func TestVercelPresets(t *testing.T) {
	expectPresetValues(t, presetsOverSignedVector(t, "vercel-computed", nil), presetValues{
		ID:         "uQ6c2a8ZSeKMcbWAaKTwZLsH",
		Type:       "deployment.succeeded",
		EntityKey:  "dpl_2qDB8PqGKhnyUFCiVLwLiL5dJGzD",
		OccurredAt: presetPtr(time.Unix(1772366400, 0)),
	})
}
