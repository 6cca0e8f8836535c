package provider_test

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/event"
	"github.com/hookkeeper/hookkeeper/internal/provider"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// Helpers of the provider_test package: the providers' tests that run a request through
// the receiver's own extractor (internal/config, which imports this package, so these
// tests cannot be in package provider), and check a provider's sample.

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

// presetHMAC is HMAC-SHA256 of msg under key (the package's oracleMAC).
func presetHMAC(key, msg string) []byte { return provider.OracleMAC(sha256.New, []byte(key), msg) }

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
