package provider_test

import (
	"encoding/hex"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/internal/event"
	"github.com/hookkeeper/hookkeeper/internal/provider"
)

func TestPaddlePresets(t *testing.T) {
	t.Run("transaction.completed reads the grand total", func(t *testing.T) {
		const secret = "pdl_ntfset_01hv8x2acma2gz9yvdc3bbkzy5_testkey"
		body := `{"event_id":"evt_01hv8x3","event_type":"transaction.completed","occurred_at":"2026-03-01T12:00:00.000000Z",` +
			`"notification_id":"ntf_01hv8x4","data":{"id":"txn_01hv8x5","status":"completed","details":{"totals":{"grand_total":"1180","currency_code":"EUR"}}}}`
		now := time.Unix(1772366400, 0)
		ts := strconv.FormatInt(now.Unix(), 10)
		header := http.Header{"Paddle-Signature": {"ts=" + ts + ";h1=" + hex.EncodeToString(presetHMAC(secret, ts+":"+body))}}
		got := presetRequest{provider: provider.ProviderPaddle, secret: secret, body: body, header: header, now: now}.extract(t)
		assertPresetEvent(t, got, event.Event{
			ID: "evt_01hv8x3", Type: "transaction.completed", EntityKey: "txn_01hv8x5", Amount: presetInt(1180),
			OccurredAt: presetTime(t, "2026-03-01T12:00:00Z"),
		})
	})
}

func TestPaddleSample(t *testing.T) { assertSampleValid(t, "paddle") }
