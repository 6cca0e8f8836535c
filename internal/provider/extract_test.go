package provider_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/event"
	"github.com/hookkeeper/hookkeeper/internal/provider"
	"github.com/hookkeeper/hookkeeper/internal/signature"
	"github.com/hookkeeper/hookkeeper/internal/signature/sigtest"
)

// The provider_test package: the providers' tests that run a request through the
// receiver's own extractor (internal/config, which imports this package, so these tests
// cannot be in package provider), and check a provider's sample; and their helpers.

// presetRequest is one signed request of a provider, run through the provider's
// verifier and its presets exactly as the receiver does (config.NewExtractor).
type presetRequest struct {
	provider  v1alpha1.ProviderType
	signedURL string
	secret    string
	body      string
	header    http.Header
	now       time.Time
}

// presetVector is a vector of testdata/ as a presetRequest.
func presetVector(t *testing.T, name string) presetRequest {
	t.Helper()
	v := provider.VectorNamed(t, name)
	req := v.Request()
	return presetRequest{provider: v1alpha1.ProviderType(v.Provider), signedURL: v.SignedURL, secret: v.Secret, body: v.Body, header: req.Header, now: req.Now}
}

// extract verifies the request and extracts its one event with the provider presets.
func (r presetRequest) extract(t *testing.T) event.Event {
	t.Helper()
	spec := v1alpha1.ProviderSpec{Type: r.provider, SignedURL: r.signedURL}
	verifier, err := provider.NewVerifier(spec, []signature.Secret{{Value: r.secret}})
	if err != nil {
		t.Fatal(err)
	}
	verified, err := verifier.Open(signature.Request{Header: r.header, Body: []byte(r.body), Method: http.MethodPost, Now: r.now})
	if err != nil {
		t.Fatalf("the request does not verify: %v", err)
	}
	x, err := config.NewExtractor(v1alpha1.WebhookEndpointSpec{Provider: spec})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := x.Extract(verified, r.header)
	if err != nil {
		t.Fatalf("the presets do not evaluate: %v", err)
	}
	if len(evs) != 1 {
		t.Fatalf("got %d events, want 1", len(evs))
	}
	return evs[0]
}

// assertPresetEvent compares what the presets read with want, as the package's tests
// compare presets (expectPresetValues); a nil want.OccurredAt or want.Amount means none.
func assertPresetEvent(t *testing.T, got, want event.Event) {
	t.Helper()
	values := func(e event.Event) provider.PresetValues {
		return provider.PresetValues{ID: e.ID, Type: e.Type, EntityKey: e.EntityKey, Amount: e.Amount, OccurredAt: e.OccurredAt}
	}
	provider.ExpectPresetValues(t, values(got), values(want))
}

// presetHMAC is HMAC-SHA256 of msg under key.
func presetHMAC(key, msg string) []byte { return sigtest.MAC(sha256.New, []byte(key), msg) }

func presetDigest(body string) string {
	sum := sha256.Sum256([]byte(body))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func presetInt(v int64) *int64 { return &v }

func presetTime(t *testing.T, s string) *time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return &at
}

// assertSampleValid checks config/samples/providers/<name>.yaml as the operator would
// (config.Validate: the provider spec, CEL expressions, the state machine); the CRD's
// own rules are checked against an apiserver in test/manifests.
func assertSampleValid(t *testing.T, name string) {
	t.Helper()
	raw, err := os.ReadFile("../../config/samples/providers/" + name + ".yaml")
	if err != nil {
		t.Fatal(err)
	}
	var endpoint string
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		if strings.Contains(doc, "\nkind: WebhookEndpoint\n") {
			endpoint = doc
		}
	}
	if endpoint == "" {
		t.Fatalf("%s.yaml has no WebhookEndpoint", name)
	}
	// Without a manifest file, ReadManifest reads the manifest from config.EnvEndpoint.
	we, err := config.ReadManifest("", func(name string) string {
		if name == config.EnvEndpoint {
			return endpoint
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := config.Validate(we); err != nil {
		t.Fatalf("%s.yaml: %v", name, err)
	}
}

// TestVectorPresets runs vectors, signed as their provider's SDK signs them (or computed
// from the provider's docs), through the receiver's extractor and checks the event the
// presets read; an empty id is the digest of the signed body (Calendly's body has no
// event id).
func TestVectorPresets(t *testing.T) {
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
		{"Calendly invitee.created", "calendly-computed",
			"", "invitee.created", "https://api.calendly.com/scheduled_events/GBGBDCAADAEDCRZ2/invitees/AAAAAAAAAAAAAAAA", "2026-03-01T12:00:00Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := presetVector(t, tc.vector)
			if tc.id == "" {
				tc.id = presetDigest(r.body)
			}
			assertPresetEvent(t, r.extract(t), event.Event{ID: tc.id, Type: tc.typ, EntityKey: tc.entity, OccurredAt: presetTime(t, tc.occurredAt)})
		})
	}
}

// TestSignedRequestPresets runs requests signed here, as the provider's docs describe,
// through the extractor.
func TestSignedRequestPresets(t *testing.T) {
	const (
		paddleSecret    = "pdl_ntfset_01hv8x2acma2gz9yvdc3bbkzy5_testkey"
		pagerDutySecret = "pagerduty-test-subscription-secret"
	)
	now := time.Unix(1772366400, 0)
	ts := strconv.FormatInt(now.Unix(), 10)
	paddleBody := `{"event_id":"evt_01hv8x3","event_type":"transaction.completed","occurred_at":"2026-03-01T12:00:00.000000Z",` +
		`"notification_id":"ntf_01hv8x4","data":{"id":"txn_01hv8x5","status":"completed","details":{"totals":{"grand_total":"1180","currency_code":"EUR"}}}}`
	pagerDutyBody := `{"event":{"id":"01CEX5UJ0IZEZXIXPJG6R1YQWU","event_type":"pagey.ping","resource_type":"pagey",` +
		`"occurred_at":"2026-03-01T12:00:00.000Z","agent":null,"client":null,"data":{"message":"Hello from your friend Pagey!","type":"ping"}}}`
	for _, tc := range []struct {
		name string
		req  presetRequest
		want event.Event
	}{
		{"Paddle transaction.completed reads the grand total", presetRequest{
			provider: provider.ProviderPaddle, secret: paddleSecret, body: paddleBody, now: now,
			header: http.Header{"Paddle-Signature": {"ts=" + ts + ";h1=" + hex.EncodeToString(presetHMAC(paddleSecret, ts+":"+paddleBody))}},
		}, event.Event{
			ID: "evt_01hv8x3", Type: "transaction.completed", EntityKey: "txn_01hv8x5", Amount: presetInt(1180),
			OccurredAt: presetTime(t, "2026-03-01T12:00:00Z"),
		}},
		{"PagerDuty pagey.ping has no entity", presetRequest{
			provider: provider.ProviderPagerDuty, secret: pagerDutySecret, body: pagerDutyBody, now: now,
			header: http.Header{"X-Pagerduty-Signature": {"v1=" + hex.EncodeToString(presetHMAC(pagerDutySecret, pagerDutyBody))}},
		}, event.Event{ID: "01CEX5UJ0IZEZXIXPJG6R1YQWU", Type: "pagey.ping", OccurredAt: presetTime(t, "2026-03-01T12:00:00Z")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assertPresetEvent(t, tc.req.extract(t), tc.want)
		})
	}
}

func TestSquarePresets(t *testing.T) {
	const (
		key = "square-test-signature-key"
		url = "https://hooks.example.com/square"
	)
	sign := func(body string) http.Header {
		return http.Header{"X-Square-Hmacsha256-Signature": {base64.StdEncoding.EncodeToString(presetHMAC(key, url+body))}}
	}
	now := time.Unix(1772366400, 0)
	for _, tc := range []struct {
		name, body string
		amount     int64
	}{
		{"payment.updated", `{"merchant_id":"M1","type":"payment.updated","event_id":"e-pay","created_at":"2026-03-01T12:00:00Z",` +
			`"data":{"type":"payment","id":"pay_1","object":{"payment":{"id":"pay_1","amount_money":{"amount":1250,"currency":"USD"},"status":"COMPLETED"}}}}`, 1250},
		{"refund.created", `{"merchant_id":"M1","type":"refund.created","event_id":"e-ref","created_at":"2026-03-01T12:00:00Z",` +
			`"data":{"type":"refund","id":"ref_1","object":{"refund":{"id":"ref_1","amount_money":{"amount":300,"currency":"USD"},"status":"PENDING"}}}}`, 300},
	} {
		t.Run(tc.name+" reads the amount", func(t *testing.T) {
			got := presetRequest{provider: provider.ProviderSquare, signedURL: url, secret: key, body: tc.body, header: sign(tc.body), now: now}.extract(t)
			if got.Amount == nil || *got.Amount != tc.amount || got.Type != tc.name {
				t.Fatalf("type %q amount %v, want %q %d", got.Type, got.Amount, tc.name, tc.amount)
			}
		})
	}
	t.Run("another URL does not verify", func(t *testing.T) {
		// The URL is signed: a request signed for another endpoint (or a signedURL that
		// differs from the subscription's by one byte) is a mismatch.
		body := `{"type":"payment.updated","event_id":"e-1","data":{"id":"pay_1"}}`
		v, err := provider.NewVerifier(v1alpha1.ProviderSpec{Type: provider.ProviderSquare, SignedURL: url + "/"}, []signature.Secret{{Value: key}})
		if err != nil {
			t.Fatal(err)
		}
		err = v.Verify(signature.Request{Header: sign(body), Body: []byte(body), Method: http.MethodPost, Now: now})
		var e *signature.Error
		if !errors.As(err, &e) || e.Reason != signature.ReasonMismatch {
			t.Fatalf("want a mismatch, got %v", err)
		}
	})
	t.Run("signedURL is required", func(t *testing.T) {
		if _, err := provider.NewVerifier(v1alpha1.ProviderSpec{Type: provider.ProviderSquare}, []signature.Secret{{Value: key}}); err == nil {
			t.Fatal("a Square spec without signedURL was accepted")
		}
	})
}

// TestProviderSamples checks the samples of the providers whose tests run through the
// extractor.
func TestProviderSamples(t *testing.T) {
	for _, name := range []string{"calendly", "paddle", "pagerduty", "square"} {
		t.Run(name, func(t *testing.T) { assertSampleValid(t, name) })
	}
}
