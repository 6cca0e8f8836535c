package provider_test

import (
	"encoding/base64"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/provider"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

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

func TestSquareSample(t *testing.T) { assertSampleValid(t, "square") }
