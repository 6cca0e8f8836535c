package provider_test

import (
	"testing"

	"github.com/hookkeeper/hookkeeper/internal/event"
)

// TestPublishedVectorPresets runs each published vector, signed as its provider's SDK
// signs it, through the receiver's extractor and checks the event the presets read.
func TestPublishedVectorPresets(t *testing.T) {
	for _, tc := range []struct {
		name, vector                string
		id, typ, entity, occurredAt string
	}{
		{"Paddle price.created", "paddle-go-sdk",
			"evt_01hsdn97563968dy0szkmgjwh3", "price.created", "pri_01hsdn96k2hxjzsq5yerecdj9j", "2024-03-20T10:07:35.590857Z"},
		{"PagerDuty incident.priority_updated", "pagerduty-go-client",
			"01BWDWL3NYY7LUFPZCC28QUCMK", "incident.priority_updated", "PGR0VU2", "2021-04-26T17:36:27.458Z"},
		{"Square webhooks.test_notification", "square-sdk",
			"ac3ac95b-f97d-458c-a6e6-18981597e05f", "webhooks.test_notification", "bc368e64-01aa-407e-b46e-3231809b1129", "2022-07-13T20:30:59.037339943Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := presetVector(t, tc.vector).extract(t)
			assertPresetEvent(t, got, event.Event{ID: tc.id, Type: tc.typ, EntityKey: tc.entity, OccurredAt: presetTime(t, tc.occurredAt)})
		})
	}
}
