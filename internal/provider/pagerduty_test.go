package provider_test

import (
	"encoding/hex"
	"net/http"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/internal/event"
	"github.com/hookkeeper/hookkeeper/internal/provider"
)

func TestPagerDutyPresets(t *testing.T) {
	t.Run("pagey.ping has no entity", func(t *testing.T) {
		const secret = "pagerduty-test-subscription-secret"
		body := `{"event":{"id":"01CEX5UJ0IZEZXIXPJG6R1YQWU","event_type":"pagey.ping","resource_type":"pagey",` +
			`"occurred_at":"2026-03-01T12:00:00.000Z","agent":null,"client":null,"data":{"message":"Hello from your friend Pagey!","type":"ping"}}}`
		header := http.Header{"X-Pagerduty-Signature": {"v1=" + hex.EncodeToString(presetHMAC(secret, body))}}
		got := presetRequest{provider: provider.ProviderPagerDuty, secret: secret, body: body, header: header, now: time.Unix(1772366400, 0)}.extract(t)
		assertPresetEvent(t, got, event.Event{ID: "01CEX5UJ0IZEZXIXPJG6R1YQWU", Type: "pagey.ping", OccurredAt: presetTime(t, "2026-03-01T12:00:00Z")})
	})
}

func TestPagerDutySample(t *testing.T) { assertSampleValid(t, "pagerduty") }
