package convergence

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
)

// Requests are built and signed here by hand, from the providers' published schemes,
// never with the receiver's own verifier code.

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

// stripeSign sets Stripe-Signature: t=<now>,v1=hex(HMAC-SHA256(secret, "<t>.<body>")),
// signed afresh on every attempt as Stripe does.
func stripeSign(req *http.Request, secret string, body []byte, now time.Time) {
	ts := strconv.FormatInt(now.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts))
	mac.Write([]byte("."))
	mac.Write(body)
	req.Header.Set("Stripe-Signature", "t="+ts+",v1="+hex.EncodeToString(mac.Sum(nil)))
}

// ---- Adyen ----

var adyenZone = time.FixedZone("CET", 3600)

// adyenItem is one NotificationRequestItem with its HMAC signature: base64 of
// HMAC-SHA256, keyed with the hex-decoded key, over
// pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:eventCode:success.
func adyenItem(ev modelEvent, entityKey, original string, hexKey []byte) map[string]any {
	const merchant, currency = "ShopECOM", "EUR"
	signed := strings.Join([]string{ev.PSP, original, merchant, entityKey,
		strconv.FormatInt(ev.Amount, 10), currency, ev.Type, ev.Success}, ":")
	mac := hmac.New(sha256.New, hexKey)
	mac.Write([]byte(signed))
	item := map[string]any{
		"pspReference":        ev.PSP,
		"merchantAccountCode": merchant,
		"merchantReference":   entityKey,
		"amount":              map[string]any{"value": ev.Amount, "currency": currency},
		"eventCode":           ev.Type,
		"eventDate":           ev.OccurredAt.In(adyenZone).Format(time.RFC3339),
		"success":             ev.Success,
		"paymentMethod":       "visa",
		"additionalData":      map[string]any{"hmacSignature": base64.StdEncoding.EncodeToString(mac.Sum(nil))},
	}
	if original != "" {
		item["originalReference"] = original
	}
	return map[string]any{"NotificationRequestItem": item}
}

func adyenBody(items []map[string]any) []byte {
	body, err := json.Marshal(map[string]any{"live": "false", "notificationItems": items})
	if err != nil {
		panic(err)
	}
	return body
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
