package provider_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/event"
	"github.com/hookkeeper/hookkeeper/internal/provider"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

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

// presetVector reads a vector of testdata/providers/<file>.json as a presetRequest.
func presetVector(t *testing.T, file, name string) presetRequest {
	t.Helper()
	raw, err := os.ReadFile("testdata/providers/" + file + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Vectors []struct {
			Name, Provider, SignedURL, Secret, Body string
			Headers                                 map[string]string
			Now                                     int64
		}
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for _, v := range doc.Vectors {
		if v.Name != name {
			continue
		}
		h := http.Header{}
		for k, val := range v.Headers {
			h.Set(k, val)
		}
		return presetRequest{provider: v1alpha1.ProviderType(v.Provider), signedURL: v.SignedURL, secret: v.Secret, body: v.Body, header: h, now: time.Unix(v.Now, 0)}
	}
	t.Fatalf("%s.json has no vector %s", file, name)
	return presetRequest{}
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

// assertPresetEvent compares what the presets read with want; a zero want.OccurredAt or
// want.Amount means none.
func assertPresetEvent(t *testing.T, got, want event.Event) {
	t.Helper()
	if got.ID != want.ID || got.Type != want.Type || got.EntityKey != want.EntityKey {
		t.Errorf("id/type/entityKey = %q/%q/%q, want %q/%q/%q", got.ID, got.Type, got.EntityKey, want.ID, want.Type, want.EntityKey)
	}
	if (got.Amount == nil) != (want.Amount == nil) || got.Amount != nil && *got.Amount != *want.Amount {
		t.Errorf("amount = %v, want %v", got.Amount, want.Amount)
	}
	if (got.OccurredAt == nil) != (want.OccurredAt == nil) || got.OccurredAt != nil && !got.OccurredAt.Equal(*want.OccurredAt) {
		t.Errorf("occurredAt = %v, want %v", got.OccurredAt, want.OccurredAt)
	}
}

func presetHMAC(key, msg string) []byte {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(msg))
	return m.Sum(nil)
}

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
	path := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(path, []byte(endpoint), 0o600); err != nil {
		t.Fatal(err)
	}
	we, err := config.ReadManifest(path, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := config.Validate(we); err != nil {
		t.Fatalf("%s.yaml: %v", name, err)
	}
}

func TestPaddlePresets(t *testing.T) {
	t.Run("published price.created", func(t *testing.T) {
		got := presetVector(t, "paddle", "paddle-go-sdk").extract(t)
		assertPresetEvent(t, got, event.Event{
			ID: "evt_01hsdn97563968dy0szkmgjwh3", Type: "price.created", EntityKey: "pri_01hsdn96k2hxjzsq5yerecdj9j",
			OccurredAt: presetTime(t, "2024-03-20T10:07:35.590857Z"),
		})
	})
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
