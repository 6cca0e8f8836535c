package provider

import (
	"testing"
	"time"
)

func TestResendPresets(t *testing.T) {
	v := vectorNamed(t, "resend-svix-go")
	expectPresetValues(t, presetValuesOf(t, vectorSigned(v), nil), presetValues{
		ID:         v.Headers["svix-id"],
		Type:       "email.delivered",
		EntityKey:  "56761188-7520-42d8-8898-ff6fc54ce618",
		OccurredAt: presetPtr(time.Date(2024, 2, 22, 23, 41, 12, 126e6, time.UTC)),
	})

	// contact.* and domain.* events carry no email_id; the entity is data.id.
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	contact := svixSigner(ProviderResend)(t, []byte(`{"type":"contact.created","created_at":"2026-03-01T12:00:00.000Z",`+
		`"data":{"id":"e169aa45-1ecf-4183-9955-b1499d5701d3","audience_id":"78261eea-8f8b-4381-83c6-79fa7120f1cf",`+
		`"created_at":"2026-03-01T12:00:00.000Z","email":"steve.wozniak@gmail.com","unsubscribed":false}}`), now)
	expectPresetValues(t, presetValuesOf(t, contact, nil), presetValues{
		ID:         fuzzID,
		Type:       "contact.created",
		EntityKey:  "e169aa45-1ecf-4183-9955-b1499d5701d3",
		OccurredAt: presetPtr(now),
	})
}
