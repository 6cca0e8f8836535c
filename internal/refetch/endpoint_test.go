package refetch_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/receipt"
	"github.com/hookkeeper/hookkeeper/internal/refetch"
)

func stripeProvider(baseURL string, transitions ...string) v1alpha1.ProviderSpec {
	return v1alpha1.ProviderSpec{
		Type: v1alpha1.ProviderStripe,
		Refetch: &v1alpha1.RefetchSpec{
			APIKeySecretRef: v1alpha1SecretRef("stripe-api", "key"),
			BaseURL:         baseURL,
			// The tests' stubs serve plain http on 127.0.0.1.
			AllowInsecureHTTP: strings.HasPrefix(baseURL, "http://"),
			Transitions:       transitions,
			Timeout:           &metav1.Duration{Duration: 2 * time.Second},
		},
	}
}

func TestNeedsOnlyListedTransitions(t *testing.T) {
	r, err := refetch.New(stripeProvider("", "capture", "refund"), testAPIKey, refetch.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"capture": true, "refund": true, "fail": false, "": false} {
		if got := r.Needs(name); got != want {
			t.Errorf("Needs(%q) = %v, want %v", name, got, want)
		}
	}
	var none *refetch.Refetcher
	if none.Needs("capture") {
		t.Error("a nil Refetcher needs a fetch")
	}
}

func TestFromEnv(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }

	r, err := refetch.FromEnv(v1alpha1.ProviderSpec{Type: v1alpha1.ProviderStripe}, getenv, refetch.Options{})
	if err != nil || r != nil {
		t.Fatalf("without a refetch block: %v, %v; want nil, nil", r, err)
	}
	_, err = refetch.FromEnv(stripeProvider("", "capture"), getenv, refetch.Options{})
	if err == nil || !strings.Contains(err.Error(), config.EnvRefetchAPIKey) {
		t.Fatalf("without the key: %v, want an error naming %s", err, config.EnvRefetchAPIKey)
	}
	env[config.EnvRefetchAPIKey] = testAPIKey
	if r, err = refetch.FromEnv(stripeProvider("", "capture"), getenv, refetch.Options{}); err != nil || r == nil {
		t.Fatalf("with the key: %v, %v", r, err)
	}
	other := stripeProvider("", "capture")
	other.Type = v1alpha1.ProviderAdyen
	if _, err := refetch.FromEnv(other, getenv, refetch.Options{}); err == nil {
		t.Fatal("refetch for Adyen was accepted")
	}
}

func TestLiveFuncMapsOntoTheReceipt(t *testing.T) {
	stub := newStripeStub(t)
	stub.set("/v1/payment_intents/pi_live", http.StatusOK, objectFixture(t, "payment_intent_succeeded.json", "pi_live", ""))
	r, err := refetch.New(stripeProvider(stub.URL(), "capture"), testAPIKey, refetch.Options{CacheTTL: -1})
	if err != nil {
		t.Fatal(err)
	}
	live := refetch.LiveFunc(r)

	v, err := live(context.Background(), stripeEvent(t, "payment_intent.succeeded", "payment_intent", "pi_live", "succeeded"))
	if err != nil {
		t.Fatal(err)
	}
	lv, ok := v.(receipt.LiveValue)
	if !ok {
		t.Fatalf("live value is %T, want receipt.LiveValue", v)
	}
	if obj, _ := lv.Value.(map[string]any); obj["status"] != "succeeded" || lv.Detail != "refetch: payment_intent pi_live is succeeded" {
		t.Errorf("live value %v, detail %q", lv.Value, lv.Detail)
	}

	_, err = live(context.Background(), stripeEvent(t, "payment_intent.succeeded", "payment_intent", "pi_123", "succeeded"))
	var rejected *receipt.LiveRejected
	if !errors.As(err, &rejected) || rejected.Detail != "refetch: object pi_123 not found" {
		t.Errorf("404: err = %v, want receipt.LiveRejected with the not-found detail", err)
	}

	stub.set("/v1/payment_intents/pi_down", http.StatusInternalServerError, fixture(t, "error_500.json"))
	_, err = live(context.Background(), stripeEvent(t, "payment_intent.succeeded", "payment_intent", "pi_down", "succeeded"))
	if !errors.Is(err, refetch.ErrUnavailable) || errors.As(err, &rejected) {
		t.Errorf("500: err = %v, want ErrUnavailable, not a rejection", err)
	}
}

func v1alpha1SecretRef(name, key string) corev1.SecretKeySelector {
	return corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
}
