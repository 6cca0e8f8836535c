package provider

import (
	"testing"
	"time"
)

func TestTypeformPresets(t *testing.T) {
	expectPresetValues(t, presetsOverSignedVector(t, "typeform-computed", nil), presetValues{
		ID:         "01KJMB6Y6N3Q8Z1T5V7W9X2Y4Z",
		Type:       "form_response",
		EntityKey:  "a3a12ec67a1365927098a606107fac15",
		OccurredAt: presetPtr(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)),
	})
}
