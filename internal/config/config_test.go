package config

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/event"
)

func ptr[T any](v T) *T { return &v }

func validEndpoint(t *testing.T) *v1alpha1.WebhookEndpoint {
	t.Helper()
	we, err := ReadManifest("testdata/orders-payments.yaml", func(string) string { return "" })
	if err != nil {
		t.Fatalf("read manifest: %v", err)
	}
	return we
}

func TestPresets(t *testing.T) {
	occurred := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		provider v1alpha1.ProviderType
		body     string
		header   http.Header
		want     event.Event
	}{
		{
			provider: v1alpha1.ProviderStripe,
			body:     `{"id":"evt_1","type":"payment_intent.succeeded","created":1772366400,"data":{"object":{"id":"pi_1","amount":125000}}}`,
			want:     event.Event{ID: "evt_1", Type: "payment_intent.succeeded", EntityKey: "pi_1", Amount: ptr[int64](125000), OccurredAt: &occurred},
		},
		{
			provider: v1alpha1.ProviderGitHub,
			body:     `{"action":"opened","pull_request":{"html_url":"https://github.com/o/r/pull/7"},"repository":{"full_name":"o/r"}}`,
			header:   http.Header{"X-Github-Delivery": {"d-1"}, "X-Github-Event": {"pull_request"}},
			want:     event.Event{ID: "{digest}", Type: "pull_request.opened", EntityKey: "https://github.com/o/r/pull/7"},
		},
		{
			provider: v1alpha1.ProviderGitHub,
			body:     `{"ref":"refs/heads/main","repository":{"full_name":"o/r"}}`,
			header:   http.Header{"X-Github-Delivery": {"d-2"}, "X-Github-Event": {"push"}},
			want:     event.Event{ID: "{digest}", Type: "push", EntityKey: "o/r"},
		},
		{
			provider: v1alpha1.ProviderStandardWebhooks,
			body:     `{"type":"invoice.paid","timestamp":"2026-03-01T12:00:00Z","data":{"id":"inv_9","amount":4200}}`,
			header:   http.Header{"Webhook-Id": {"msg_1"}},
			want:     event.Event{ID: "msg_1", Type: "invoice.paid", EntityKey: "inv_9", Amount: ptr[int64](4200), OccurredAt: &occurred},
		},
		{
			provider: v1alpha1.ProviderShopify,
			body:     `{"id":820982911946154508,"total_price":"10.00","updated_at":"2026-03-01T13:00:00+01:00"}`,
			// The unsigned Triggered-At is not read: the body's updated_at is.
			header: http.Header{"X-Shopify-Webhook-Id": {"b54557e4"}, "X-Shopify-Topic": {"orders/paid"}, "X-Shopify-Triggered-At": {"2099-01-01T00:00:00Z"}},
			want:   event.Event{ID: "orders/paid:{digest}", Type: "orders/paid", EntityKey: "820982911946154508", OccurredAt: &occurred},
		},
		{
			provider: v1alpha1.ProviderSlack,
			body:     `{"type":"event_callback","event_id":"Ev1","event_time":1772366400,"event":{"type":"message","channel":"C1"}}`,
			want:     event.Event{ID: "Ev1", Type: "message", EntityKey: "C1", OccurredAt: &occurred},
		},
		{
			provider: v1alpha1.ProviderHMAC,
			body:     `{"id":"x-1","type":"thing.done"}`,
			want:     event.Event{ID: "x-1", Type: "thing.done"},
		},
		{
			provider: v1alpha1.ProviderAdyen,
			body: `{"live":"false","notificationItems":[{"NotificationRequestItem":{"pspReference":"PSP1","eventCode":"AUTHORISATION",` +
				`"success":"true","merchantReference":"order-1","amount":{"value":1000,"currency":"EUR"},"eventDate":"2026-03-01T13:00:00+01:00"}}]}`,
			// eventDate is not signed: the event carries no time.
			want: event.Event{ID: "PSP1:AUTHORISATION:true", Type: "AUTHORISATION", EntityKey: "order-1", Amount: ptr[int64](1000)},
		},
	}
	for _, tc := range cases {
		t.Run(string(tc.provider)+"/"+tc.want.Type, func(t *testing.T) {
			x := extractorFor(t, tc.provider, v1alpha1.EventSpec{})
			evs, err := signedExtract(t, x, tc.provider, []byte(tc.body), tc.header, testNow)
			if err != nil {
				t.Fatalf("Extract: %v", err)
			}
			tc.want.ID = strings.ReplaceAll(tc.want.ID, "{digest}", digestOf([]byte(tc.body)))
			if len(evs) != 1 {
				t.Fatalf("got %d events, want 1", len(evs))
			}
			got := evs[0]
			if got.ID != tc.want.ID || got.Type != tc.want.Type || got.EntityKey != tc.want.EntityKey {
				t.Errorf("id/type/entityKey = %q/%q/%q, want %q/%q/%q", got.ID, got.Type, got.EntityKey, tc.want.ID, tc.want.Type, tc.want.EntityKey)
			}
			if !equalPtr(got.Amount, tc.want.Amount) {
				t.Errorf("amount = %v, want %v", deref(got.Amount), deref(tc.want.Amount))
			}
			if (got.OccurredAt == nil) != (tc.want.OccurredAt == nil) || got.OccurredAt != nil && !got.OccurredAt.Equal(*tc.want.OccurredAt) {
				t.Errorf("occurredAt = %v, want %v", deref(got.OccurredAt), deref(tc.want.OccurredAt))
			}
			for name := range got.Headers {
				if strings.Contains(name, "signature") || strings.Contains(name, "hmac") {
					t.Errorf("header %q is kept; signature headers must not be stored", name)
				}
			}
			if len(got.Payload) == 0 || got.Body == nil {
				t.Errorf("payload or body missing")
			}
		})
	}
}

func equalPtr[T comparable](a, b *T) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestAdyenBatchYieldsOneEventPerItem(t *testing.T) {
	x := extractorFor(t, v1alpha1.ProviderAdyen, v1alpha1.EventSpec{})
	body := `{"live":"false","notificationItems":[
	 {"NotificationRequestItem":{"pspReference":"A","eventCode":"AUTHORISATION","success":"true","merchantReference":"o1","amount":{"value":5,"currency":"EUR"}}},
	 {"NotificationRequestItem":{"pspReference":"A","eventCode":"CAPTURE","success":"true","merchantReference":"o1","amount":{"value":5,"currency":"EUR"}}}]}`
	evs, err := signedExtract(t, x, v1alpha1.ProviderAdyen, []byte(body), nil, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].ID != "A:AUTHORISATION:true" || evs[1].ID != "A:CAPTURE:true" {
		t.Fatalf("events = %+v", evs)
	}
	var item map[string]any
	if err := json.Unmarshal(evs[1].Payload, &item); err != nil || item["eventCode"] != "CAPTURE" {
		t.Fatalf("payload of item 2 is not the item's JSON: %s", evs[1].Payload)
	}
	if _, err := signedExtract(t, x, v1alpha1.ProviderAdyen, []byte(`{"live":"false","notificationItems":[]}`), nil, testNow); !errors.Is(err, ErrBadPayload) {
		t.Fatalf("empty batch: err = %v, want ErrBadPayload", err)
	}
}

func TestExtractOverridesAndOptionalFields(t *testing.T) {
	x := extractorFor(t, v1alpha1.ProviderStripe, v1alpha1.EventSpec{EntityKey: "body.data.object.metadata.client_txn_id"})
	evs, err := signedExtract(t, x, v1alpha1.ProviderStripe, []byte(`{"id":"evt_2","type":"payment_intent.succeeded","data":{"object":{"amount":"12","metadata":{"client_txn_id":"txn-9"}}}}`), nil, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if ev := evs[0]; ev.EntityKey != "txn-9" || ev.Amount == nil || *ev.Amount != 12 || ev.OccurredAt != nil {
		t.Fatalf("event = %+v", ev)
	}
	// Optional fields that fail on a payload are left empty; the event still records.
	evs, err = signedExtract(t, x, v1alpha1.ProviderStripe, []byte(`{"id":"evt_3","type":"balance.available","data":{"object":{"amount":1.5}}}`), nil, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if ev := evs[0]; ev.EntityKey != "" || ev.Amount != nil {
		t.Fatalf("event = %+v, want no entity key and no amount", ev)
	}
	for _, body := range []string{`{"type":"x"}`, `{"id":"","type":"x"}`, `{"id":"e"}`, `[1]`, `not json`, `{"id":"e","type":"x"} trailing`} {
		if _, err := signedExtract(t, x, v1alpha1.ProviderStripe, []byte(body), nil, testNow); !errors.Is(err, ErrBadPayload) {
			t.Errorf("Extract(%s): err = %v, want ErrBadPayload", body, err)
		}
	}
}

func TestExtractFormEncodedPayload(t *testing.T) {
	x := extractorFor(t, v1alpha1.ProviderGitHub, v1alpha1.EventSpec{})
	h := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}, "X-Github-Delivery": {"d"}, "X-Github-Event": {"ping"}}
	evs, err := signedExtract(t, x, v1alpha1.ProviderGitHub, []byte(`payload=%7B%22zen%22%3A%22hi%22%2C%22repository%22%3A%7B%22full_name%22%3A%22o%2Fr%22%7D%7D`), h, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if evs[0].Type != "ping" || evs[0].EntityKey != "o/r" || string(evs[0].Payload) != `{"zen":"hi","repository":{"full_name":"o/r"}}` {
		t.Fatalf("event = %+v payload %s", evs[0], evs[0].Payload)
	}
}

func TestKeptHeadersDropsCredentials(t *testing.T) {
	h := http.Header{
		"Authorization": {"Bearer x"}, "Cookie": {"a=b"}, "Stripe-Signature": {"t=1,v1=aa"},
		"X-Gitlab-Token": {"t"}, "X-Custom-Sig": {"s"}, "Content-Type": {"application/json"}, "User-Agent": {"Stripe/1.0", "second"},
	}
	got := KeptHeaders(h, "x-custom-sig")
	want := map[string]string{"content-type": "application/json", "user-agent": "Stripe/1.0"}
	if len(got) != len(want) {
		t.Fatalf("kept %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("kept %v, want %v", got, want)
		}
	}
}

func TestValidate(t *testing.T) {
	if err := Validate(validEndpoint(t)); err != nil {
		t.Fatalf("valid endpoint: %v", err)
	}
	// guard sets the guard of transition i (capture, fail, refund).
	guard := func(i int, expr string) func(*v1alpha1.WebhookEndpoint) {
		return func(we *v1alpha1.WebhookEndpoint) { we.Spec.StateMachine.Transitions[i].Guard = expr }
	}
	cases := []struct {
		name   string
		mutate func(*v1alpha1.WebhookEndpoint)
		want   string
	}{
		{"undeclared variable in guard", guard(0, "event.amount == entty.amount"), "spec.stateMachine.transitions[capture].guard: undeclared reference to 'entty'"},
		{"unknown field of event", guard(0, "event.amout == entity.amount"), "spec.stateMachine.transitions[capture].guard: undefined field 'amout' of 'event'"},
		{"guard is not bool", guard(2, "entity.key + 'x'"), "spec.stateMachine.transitions[refund].guard: expression has type string, want bool"},
		{"syntax error", guard(0, "event.amount =="), "spec.stateMachine.transitions[capture].guard: Syntax error"},
		{"bad regex literal", guard(0, "event.id.matches('([')"), "spec.stateMachine.transitions[capture].guard:"},
		{"event field wrong type", func(we *v1alpha1.WebhookEndpoint) {
			we.Spec.Event.Type = "1 == 1"
		}, "spec.event.type: expression has type bool, want string"},
		{"event field bad reference", func(we *v1alpha1.WebhookEndpoint) {
			we.Spec.Event.ID = "bdy.id"
		}, "spec.event.id: undeclared reference to 'bdy'"},
		{"to not a state", func(we *v1alpha1.WebhookEndpoint) {
			we.Spec.StateMachine.Transitions[1].To = "gone"
		}, `spec.stateMachine.transitions[fail].to: "gone" is not one of stateMachine.states`},
		{"duplicate transition", func(we *v1alpha1.WebhookEndpoint) {
			we.Spec.StateMachine.Transitions[1].Name = "capture"
		}, `transition name "capture" is used twice`},
		{"create with app table", func(we *v1alpha1.WebhookEndpoint) {
			we.Spec.Entity.OnUnmatched = v1alpha1.UnmatchedCreate
		}, "spec.entity.onUnmatched: Create needs the managed entity table"},
		{"hmac on stripe", func(we *v1alpha1.WebhookEndpoint) {
			we.Spec.Provider.HMAC = &v1alpha1.HMACSpec{SchemeSpec: v1alpha1.SchemeSpec{Header: "X-Sig"}}
		}, "spec.provider.hmac: is only allowed when provider.type is HMAC"},
		{"hmac template", func(we *v1alpha1.WebhookEndpoint) {
			we.Spec.Provider.Type = v1alpha1.ProviderHMAC
			we.Spec.Provider.HMAC = &v1alpha1.HMACSpec{SchemeSpec: v1alpha1.SchemeSpec{Header: "X-Sig", SignedContent: "{timestamp}.{bdy}"}}
		}, "spec.provider.hmac.signedContent: unknown placeholder {bdy}"},
		{"refetch unknown transition", func(we *v1alpha1.WebhookEndpoint) {
			we.Spec.Provider.Refetch = &v1alpha1.RefetchSpec{Transitions: []string{"captur"}}
		}, `spec.provider.refetch.transitions[0]: "captur" is not a transition`},
		{"schema name", func(we *v1alpha1.WebhookEndpoint) { we.Spec.Database.Schema = "Bad-Schema" }, "spec.database.schema:"},
		{"sink missing", func(we *v1alpha1.WebhookEndpoint) { we.Spec.Delivery.Sink.URL = "" }, "spec.delivery.sink: needs exactly one of url or serviceRef"},
		{"backoff", func(we *v1alpha1.WebhookEndpoint) {
			we.Spec.Delivery.Backoff.Max = &metav1.Duration{Duration: time.Millisecond}
		}, "spec.delivery.backoff.max:"},
		{"retention shorter than an hour", func(we *v1alpha1.WebhookEndpoint) {
			we.Spec.Retention.DeliveredFor = &metav1.Duration{Duration: time.Minute}
		}, "spec.retention.deliveredFor: must be 0s (forever) or between 1h0m0s and 87600h0m0s, got 1m0s"},
		{"dedupe record outlived by its payload", func(we *v1alpha1.WebhookEndpoint) {
			we.Spec.Retention.PayloadFor = &metav1.Duration{Duration: 48 * time.Hour}
			we.Spec.Retention.DedupeFor = &metav1.Duration{Duration: 24 * time.Hour}
		}, "spec.retention.dedupeFor: must be 0s (forever) or at least retention.payloadFor (48h0m0s)"},
		{"payload kept forever, dedupe record not", func(we *v1alpha1.WebhookEndpoint) {
			we.Spec.Retention.PayloadFor = &metav1.Duration{}
			we.Spec.Retention.DedupeFor = &metav1.Duration{Duration: 24 * time.Hour}
		}, "spec.retention.dedupeFor: must be 0s (forever) or at least retention.payloadFor (0s)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			we := validEndpoint(t)
			tc.mutate(we)
			before := we.DeepCopy()
			err := Validate(we)
			if err == nil {
				t.Fatalf("Validate accepted it, want %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %q\nwant it to contain %q", err, tc.want)
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("error is %T, want *ValidationError", err)
			}
			if !reflect.DeepEqual(we, before) {
				t.Fatalf("Validate modified its argument")
			}
		})
	}
}

func TestLoadFromFileAndEnv(t *testing.T) {
	env := map[string]string{
		EnvDatabaseURL:               "postgres://u:pw@db/app",
		EnvSigningSecretPrefix + "0": "whsec_current",
		EnvDeliverySecret:            "whsec_delivery",
	}
	getenv := func(k string) string { return env[k] }
	ep, err := Load("testdata/orders-payments.yaml", getenv)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if ep.Key() != "shop/orders-payments" || ep.DatabaseURL != env[EnvDatabaseURL] || ep.DeliverySecret != "whsec_delivery" {
		t.Fatalf("endpoint = %s %q %q", ep.Key(), ep.DatabaseURL, ep.DeliverySecret)
	}
	if ep.Spec.Database.Schema != v1alpha1.DefaultSchema || ep.Spec.Entity.Table.Schema != "public" || ep.Spec.Delivery.MaxAttempts != v1alpha1.DefaultMaxAttempts {
		t.Fatalf("defaults not applied: %+v", ep.Spec)
	}
	if ep.Tables.Events != `"hookkeeper"."webhook_events"` {
		t.Fatalf("tables = %+v", ep.Tables)
	}
	if ep.SinkURL != "http://fulfilment.shop.svc:8080/events" || ep.Verifier == nil || ep.Extractor == nil || ep.Machine == nil {
		t.Fatalf("endpoint incomplete: %+v", ep)
	}

	// The sink override wins; the env manifest works like the file.
	data, err := os.ReadFile("testdata/orders-payments.yaml")
	if err != nil {
		t.Fatal(err)
	}
	we, err := decodeManifest(data)
	if err != nil {
		t.Fatal(err)
	}
	asJSON, err := json.Marshal(we)
	if err != nil {
		t.Fatal(err)
	}
	env[EnvEndpoint] = string(asJSON)
	env[EnvSinkURL] = "http://sink.local/x"
	ep, err = Load("", getenv)
	if err != nil {
		t.Fatalf("Load from env: %v", err)
	}
	if ep.SinkURL != "http://sink.local/x" || ep.Name != "orders-payments" {
		t.Fatalf("env endpoint = %s sink %s", ep.Key(), ep.SinkURL)
	}

	// An unexpired secret without its variable fails, naming the variable, not a value.
	delete(env, EnvSigningSecretPrefix+"0")
	env[EnvSigningSecretPrefix+"1"] = "whsec_old"
	_, err = Load("testdata/orders-payments.yaml", getenv)
	if err == nil || !strings.Contains(err.Error(), EnvSigningSecretPrefix+"0") || strings.Contains(err.Error(), "whsec_old") {
		t.Fatalf("missing secret: err = %v", err)
	}
	env[EnvSigningSecretPrefix+"0"] = "whsec_current"
	delete(env, EnvDatabaseURL)
	if _, err := Load("testdata/orders-payments.yaml", getenv); err == nil || !strings.Contains(err.Error(), EnvDatabaseURL) {
		t.Fatalf("missing database URL: err = %v", err)
	}
}

func TestReadManifestRejects(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]string{
		"unknown field": "apiVersion: hookkeeper.dev/v1alpha1\nkind: WebhookEndpoint\nmetadata: {name: a}\nspec: {provder: {}}\n",
		"wrong kind":    "apiVersion: hookkeeper.dev/v1alpha1\nkind: Deployment\nmetadata: {name: a}\n",
		"no name":       "apiVersion: hookkeeper.dev/v1alpha1\nkind: WebhookEndpoint\nmetadata: {}\n",
	}
	for name, content := range cases {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".yaml")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadManifest(p, func(string) string { return "" }); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := ReadManifest("", func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), EnvEndpoint) {
		t.Errorf("no manifest: err = %v", err)
	}
}

// A sink URL is where the dispatcher POSTs every event, signed with the delivery key,
// from inside the cluster. One naming a cloud instance-metadata service is a request to
// the node's credentials endpoint, never an app: refused, naming the field. Other
// schemes than http and https are refused too; ordinary hosts pass.
func TestSinkURLRefusesMetadataAndOtherSchemes(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want string // "" passes
	}{
		{"http://169.254.169.254/latest/meta-data/iam/security-credentials/", "instance-metadata"},
		{"http://169.254.170.2/v2/credentials", "instance-metadata"},
		{"http://[fd00:ec2::254]/latest/meta-data/", "instance-metadata"},
		{"http://[fe80::1%25eth0]:8080/", "instance-metadata"},
		{"http://[::ffff:169.254.169.254]/", "instance-metadata"},
		{"http://metadata.google.internal/computeMetadata/v1/", "instance-metadata"},
		{"http://METADATA.google.internal./computeMetadata/v1/", "instance-metadata"},
		{"file:///etc/passwd", "is not http or https"},
		{"gopher://x", "is not http or https"},
		{"http:///nohost", "has no host"},
		{"http://fulfilment.shop.svc:8080/hooks", ""},
		{"https://10.0.0.7/hooks", ""},
		{"http://[fd00::1]/hooks", ""},
	} {
		t.Run(tc.url, func(t *testing.T) {
			we := validEndpoint(t)
			we.Spec.Delivery.Sink.ServiceRef = nil
			we.Spec.Delivery.Sink.URL = tc.url
			err := Validate(we)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate = %v, want the sink accepted", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), "spec.delivery.sink.url") || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate = %v, want an error naming spec.delivery.sink.url and %q", err, tc.want)
			}
		})
	}
}

func TestIsMetadataAddress(t *testing.T) {
	for addr, want := range map[string]bool{
		"169.254.169.254": true, "169.254.0.1": true, "fe80::1": true, "fd00:ec2::254": true,
		"::ffff:169.254.169.254": true, "10.0.0.7": false, "127.0.0.1": false, "fd00:ec2::253": false,
	} {
		if got := IsMetadataAddress(netip.MustParseAddr(addr)); got != want {
			t.Errorf("IsMetadataAddress(%s) = %v, want %v", addr, got, want)
		}
	}
}
