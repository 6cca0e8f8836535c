package convergence

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/signature/sigtest"
)

// Requests are built here and signed by hand, from the providers' published schemes
// (Stripe's with demo.StripeSignature, Adyen's with sigtest), never with the receiver's
// own verifier code.

const (
	ordersSample = "config/samples/hookkeeper_v1alpha1_webhookendpoint_stripe_orders.yaml"
	adyenSample  = "config/samples/hookkeeper_v1alpha1_webhookendpoint_adyen.yaml"
	namespace    = "convergence"
	// adyenTable is the app's own table the Adyen endpoint binds to.
	adyenTable = "adyen_payments"
)

// sample is a sample's WebhookEndpoint document: raw (as generic YAML, edited and
// written for the receiver, so the manifest holds only what the sample and the test
// say, never defaults of the test's own API version) and typed (for the model).
type sample struct {
	raw map[string]any
	we  *v1alpha1.WebhookEndpoint
}

// loadSample reads the WebhookEndpoint document of a sample (the file also holds a
// Secret), as the receiver would read it.
func loadSample(root, rel string) (*sample, error) {
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return nil, err
	}
	for doc := range strings.SplitSeq(string(data), "\n---\n") {
		if !strings.Contains(doc, "\nkind: WebhookEndpoint") {
			continue
		}
		s := &sample{}
		// YAML 1.2, like the receiver: a transition's "on" key stays "on".
		if err := yaml.Unmarshal([]byte(doc), &s.raw); err != nil {
			return nil, fmt.Errorf("%s: %w", rel, err)
		}
		s.we, err = config.ReadManifest("", func(k string) string {
			if k == config.EnvEndpoint {
				return doc
			}
			return ""
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", rel, err)
		}
		return s, nil
	}
	return nil, fmt.Errorf("%s has no WebhookEndpoint document", rel)
}

// obj returns the object at path in a generic document, creating it when missing.
func obj(doc map[string]any, path ...string) map[string]any {
	for _, p := range path {
		next, ok := doc[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			doc[p] = next
		}
		doc = next
	}
	return doc
}

// writeManifest writes the sample's document as JSON, with spec.stateMachine.parkFor
// set to parkFor unless it is empty. runConvergence probes the binary and drops the
// field when the binary does not know it (manifests are decoded strictly).
func (s *sample) writeManifest(path, parkFor string) error {
	sm := obj(s.raw, "spec", "stateMachine")
	delete(sm, "parkFor")
	if parkFor != "" {
		sm["parkFor"] = parkFor
	}
	raw, err := json.MarshalIndent(s.raw, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o600)
}

// edit sets the namespace, the entity binding and the test's delivery settings (fast
// retries; a lease short enough, timeout + 5s, that rows a killed receiver claimed
// come back quickly; no delivery signing secret), in both forms of the sample.
func (s *sample) edit(entity map[string]any) error {
	obj(s.raw, "metadata")["namespace"] = namespace
	obj(s.raw, "spec")["entity"] = entity
	d := obj(s.raw, "spec", "delivery")
	delete(d, "signingSecretRef")
	d["maxAttempts"] = 100
	d["backoff"] = map[string]any{"initial": "50ms", "max": "500ms"}
	d["timeout"] = "3s"
	s.we.Namespace = namespace
	raw, err := json.Marshal(entity)
	if err != nil {
		return err
	}
	s.we.Spec.Entity = v1alpha1.EntitySpec{}
	return json.Unmarshal(raw, &s.we.Spec.Entity)
}

// ---- Stripe ----

// stripeBody is a Stripe event whose object carries the order's key in its metadata
// (the orders sample reads body.data.object.metadata.client_txn_id).
func stripeBody(ev modelEvent, entityKey string) []byte {
	var object map[string]any
	meta := map[string]any{"client_txn_id": entityKey}
	switch ev.Type {
	case "charge.refunded":
		object = map[string]any{
			"id": "ch_" + entityKey, "object": "charge", "amount": ev.Amount, "amount_refunded": ev.Amount,
			"currency": "eur", "refunded": true, "payment_intent": "pi_" + entityKey, "metadata": meta,
		}
	default:
		status := "succeeded"
		if ev.Type == "payment_intent.payment_failed" {
			status = "requires_payment_method"
		}
		object = map[string]any{
			"id": "pi_" + entityKey, "object": "payment_intent", "amount": ev.Amount, "currency": "eur",
			"status": status, "metadata": meta,
		}
	}
	body, err := json.Marshal(map[string]any{
		"id": ev.ID, "object": "event", "api_version": "2024-06-20", "created": ev.OccurredAt.Unix(),
		"livemode": false, "pending_webhooks": 1, "type": ev.Type,
		"data": map[string]any{"object": object},
	})
	if err != nil {
		panic(err)
	}
	return body
}

// ---- Adyen ----

var adyenZone = time.FixedZone("CET", 3600)

// adyenItem is one NotificationRequestItem, signed under hexKey (an HMAC key as Adyen
// shows it) as sigtest signs Adyen items: base64 of HMAC-SHA256 over
// pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:eventCode:success.
func adyenItem(tb testing.TB, ev modelEvent, entityKey, original, hexKey string) map[string]any {
	it := sigtest.AdyenItem{PSP: ev.PSP, Original: original, Merchant: "ShopECOM", Reference: entityKey,
		Value: ev.Amount, Currency: "EUR", EventCode: ev.Type, Success: ev.Success}
	return it.WithSignature(it.SignatureUnder(tb, hexKey), map[string]any{
		"eventDate":     ev.OccurredAt.In(adyenZone).Format(time.RFC3339),
		"paymentMethod": "visa",
	})
}

// buildBodies builds each request's body from its items: a Stripe event, or one Adyen
// notification holding every item.
func buildBodies(tb testing.TB, reqs []*request) {
	for _, r := range reqs {
		var adyenItems []map[string]any
		for _, it := range r.items {
			ev := it.e.history[it.event]
			if r.m.provider == v1alpha1.ProviderAdyen {
				adyenItems = append(adyenItems, adyenItem(tb, ev, it.e.key, it.e.adyenOriginal(ev), r.m.secret))
			} else {
				r.body = stripeBody(ev, it.e.key)
			}
		}
		if r.m.provider == v1alpha1.ProviderAdyen {
			r.body = sigtest.AdyenBody(tb, nil, adyenItems...)
		}
	}
}

// adyenEventID is the id the Adyen preset derives: pspReference:eventCode:success.
func adyenEventID(ev modelEvent) string { return ev.PSP + ":" + ev.Type + ":" + ev.Success }

func newPost(url string, body []byte) (*http.Request, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return req, nil
}
