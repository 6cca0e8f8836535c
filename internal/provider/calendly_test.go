package provider_test

import (
	"testing"

	"github.com/hookkeeper/hookkeeper/internal/event"
)

func TestCalendlyPresets(t *testing.T) {
	r := presetVector(t, "calendly-computed")
	got := r.extract(t)
	assertPresetEvent(t, got, event.Event{
		// Calendly's body has no event id: the id is the digest of the signed body.
		ID: presetDigest(r.body), Type: "invitee.created",
		EntityKey:  "https://api.calendly.com/scheduled_events/GBGBDCAADAEDCRZ2/invitees/AAAAAAAAAAAAAAAA",
		OccurredAt: presetTime(t, "2026-03-01T12:00:00Z"),
	})
}

func TestCalendlySample(t *testing.T) { assertSampleValid(t, "calendly") }
