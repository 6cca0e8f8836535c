package v1alpha1_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

func TestMain(m *testing.M) { testsupport.Main(m) }

// newClient returns a client of the package's envtest API server and the context of
// the test's requests: 30 seconds, cancelled when the test ends.
func newClient(t *testing.T) (client.Client, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(testsupport.StartEnvtest(t), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	return c, ctx
}

// admitted creates obj, which admission must accept, and deletes it when the test ends.
func admitted(ctx context.Context, t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Create(ctx, obj); err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), obj) })
}

// stored creates obj (admitted) and reads back into got what the API server stored,
// defaults included.
func stored(ctx context.Context, t *testing.T, c client.Client, obj, got client.Object) {
	t.Helper()
	admitted(ctx, t, c, obj)
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), got); err != nil {
		t.Fatalf("get: %v", err)
	}
}

// refused creates obj, which admission must refuse with an Invalid error mentioning
// every one of want. An object accepted by mistake is deleted again.
func refused(ctx context.Context, t *testing.T, c client.Client, obj client.Object, want ...string) {
	t.Helper()
	err := c.Create(ctx, obj)
	if err == nil {
		_ = c.Delete(context.Background(), obj)
		t.Fatalf("admission accepted %T %s, want it refused mentioning %q", obj, obj.GetName(), want)
	}
	if !apierrors.IsInvalid(err) {
		t.Fatalf("want an Invalid error, got %v", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err.Error(), w)
		}
	}
}

func validEndpoint(name string) *v1alpha1.WebhookEndpoint {
	ref := func(n, k string) corev1.SecretKeySelector {
		return corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: n}, Key: k}
	}
	return &v1alpha1.WebhookEndpoint{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1alpha1.WebhookEndpointSpec{
			Provider:       v1alpha1.ProviderSpec{Type: v1alpha1.ProviderStripe},
			SigningSecrets: []v1alpha1.SigningSecret{{SecretKeyRef: ref("stripe", "current")}},
			Database:       v1alpha1.DatabaseSpec{URLSecretRef: ref("db", "uri")},
			StateMachine: v1alpha1.StateMachineSpec{
				Initial: "payment_pending",
				States:  []string{"payment_pending", "paid", "refunded"},
				Transitions: []v1alpha1.Transition{
					{Name: "capture", On: []string{"payment_intent.succeeded"}, From: []string{"payment_pending"}, To: "paid", Emit: "order.paid"},
					{Name: "refund", On: []string{"charge.refunded"}, From: []string{"paid"}, To: "refunded"},
				},
			},
			Delivery: v1alpha1.DeliverySpec{Sink: v1alpha1.SinkSpec{URL: "http://fulfilment.shop.svc:8080/events"}},
		},
	}
}

// Admission catches what OpenAPI and CEL rules can, with messages that name the problem.
func TestCRDRejectsInvalidEndpoints(t *testing.T) {
	c, ctx := newClient(t)

	cases := []struct {
		name   string
		mutate func(*v1alpha1.WebhookEndpoint)
		want   []string
	}{
		{"transition to an unknown state", func(w *v1alpha1.WebhookEndpoint) {
			w.Spec.StateMachine.Transitions[1].To = "chargeback"
		}, []string{"transition refund: to chargeback is not one of stateMachine.states"}},
		{"transition from an unknown state", func(w *v1alpha1.WebhookEndpoint) {
			w.Spec.StateMachine.Transitions[0].From = []string{"nowhere"}
		}, []string{"transition capture: from [nowhere]", "not one of stateMachine.states"}},
		{"initial not a state", func(w *v1alpha1.WebhookEndpoint) {
			w.Spec.StateMachine.Initial = "draft"
		}, []string{"stateMachine.initial draft"}},
		{"duplicate transition names", func(w *v1alpha1.WebhookEndpoint) {
			w.Spec.StateMachine.Transitions[1].Name = "capture"
		}, []string{"Duplicate value"}},
		{"hmac block without type HMAC", func(w *v1alpha1.WebhookEndpoint) {
			w.Spec.Provider.HMAC = &v1alpha1.HMACSpec{SchemeSpec: v1alpha1.SchemeSpec{Header: "X-Sig"}}
		}, []string{"provider.hmac is required when provider.type is HMAC"}},
		{"type HMAC without hmac block", func(w *v1alpha1.WebhookEndpoint) {
			w.Spec.Provider.Type = v1alpha1.ProviderHMAC
		}, []string{"provider.hmac is required when provider.type is HMAC"}},
		{"ed25519 block without type Ed25519", func(w *v1alpha1.WebhookEndpoint) {
			w.Spec.Provider.Ed25519 = &v1alpha1.Ed25519Spec{SchemeSpec: v1alpha1.SchemeSpec{Header: "X-Sig"}}
		}, []string{"provider.ed25519 is required when provider.type is Ed25519"}},
		{"composite with a prefix", func(w *v1alpha1.WebhookEndpoint) {
			hmacSpec(w, v1alpha1.SchemeSpec{Header: "X-Sig", Prefix: "v1=", SignedContent: "{timestamp}.{body}",
				Composite: &v1alpha1.CompositeSpec{TimestampKey: "t", SignatureKey: "v1"}})
		}, []string{"spec.provider.hmac", "prefix, separator and timestampHeader do not apply with composite"}},
		{"a template without the body", func(w *v1alpha1.WebhookEndpoint) {
			hmacSpec(w, v1alpha1.SchemeSpec{Header: "X-Sig", SignedContent: "{id}", IDHeader: "X-Id"})
		}, []string{"spec.provider.hmac", "signedContent must contain {body}"}},
		{"a signed timestamp with no source", func(w *v1alpha1.WebhookEndpoint) {
			hmacSpec(w, v1alpha1.SchemeSpec{Header: "X-Sig", SignedContent: "{timestamp}.{body}"})
		}, []string{"signedContent uses {timestamp}: set timestampHeader (or composite.timestampKey)"}},
		{"a composite timestamp that is not signed", func(w *v1alpha1.WebhookEndpoint) {
			hmacSpec(w, v1alpha1.SchemeSpec{Header: "X-Sig", Composite: &v1alpha1.CompositeSpec{TimestampKey: "t", SignatureKey: "v1"}})
		}, []string{"signedContent does not use {timestamp}, so the timestamp would not be authenticated"}},
		{"an id header that is not signed", func(w *v1alpha1.WebhookEndpoint) {
			hmacSpec(w, v1alpha1.SchemeSpec{Header: "X-Sig", IDHeader: "X-Id"})
		}, []string{"idHeader must be set exactly when signedContent uses {id}"}},
		{"an unknown timestamp format", func(w *v1alpha1.WebhookEndpoint) {
			hmacSpec(w, v1alpha1.SchemeSpec{Header: "X-Sig", SignedContent: "{timestamp}{body}", TimestampHeader: "X-T", TimestampFormat: "Nanos"})
		}, []string{"timestampFormat", "Unsupported value"}},
		{"a signed URL that is not a URL", func(w *v1alpha1.WebhookEndpoint) {
			w.Spec.Provider.SignedURL = "hooks.example.com/in"
		}, []string{"signedURL"}},
		{"Create with the app's table", func(w *v1alpha1.WebhookEndpoint) {
			w.Spec.Entity = v1alpha1.EntitySpec{OnUnmatched: v1alpha1.UnmatchedCreate,
				Table: &v1alpha1.EntityTableSpec{Name: "orders", KeyColumn: "id", StateColumn: "status"}}
		}, []string{"onUnmatched Create needs the managed entity table"}},
		{"sink with neither url nor serviceRef", func(w *v1alpha1.WebhookEndpoint) {
			w.Spec.Delivery.Sink = v1alpha1.SinkSpec{}
		}, []string{"exactly one of url or serviceRef"}},
		{"five signing secrets", func(w *v1alpha1.WebhookEndpoint) {
			for range 4 {
				w.Spec.SigningSecrets = append(w.Spec.SigningSecrets, w.Spec.SigningSecrets[0])
			}
		}, []string{"signingSecrets", "must have at most 4 items"}},
		{"negative parkFor", func(w *v1alpha1.WebhookEndpoint) {
			w.Spec.StateMachine.ParkFor = &metav1.Duration{Duration: -time.Hour}
		}, []string{"parkFor must be between 0s and 8760h"}},
		{"parkFor over a year", func(w *v1alpha1.WebhookEndpoint) {
			w.Spec.StateMachine.ParkFor = &metav1.Duration{Duration: 9000 * time.Hour}
		}, []string{"parkFor must be between 0s and 8760h"}},
		{"retention shorter than an hour", func(w *v1alpha1.WebhookEndpoint) {
			w.Spec.Retention.PayloadFor = &metav1.Duration{Duration: time.Minute}
		}, []string{"retention.payloadFor", "must be 0s (forever) or between 1h and 87600h"}},
		{"a dedupe record that goes before its payload", func(w *v1alpha1.WebhookEndpoint) {
			w.Spec.Retention.PayloadFor = &metav1.Duration{Duration: 48 * time.Hour}
			w.Spec.Retention.DedupeFor = &metav1.Duration{Duration: 24 * time.Hour}
		}, []string{"retention.dedupeFor must be 0s (forever) or at least retention.payloadFor"}},
		{"payloads kept no longer than parking", func(w *v1alpha1.WebhookEndpoint) {
			w.Spec.Retention.PayloadFor = &metav1.Duration{Duration: 24 * time.Hour}
		}, []string{"retention.payloadFor must be 0s (forever) or longer than stateMachine.parkFor"}},
		{"payloads kept forever, dedupe records not", func(w *v1alpha1.WebhookEndpoint) {
			w.Spec.Retention.PayloadFor = &metav1.Duration{}
		}, []string{"retention.dedupeFor must be 0s (forever) or at least retention.payloadFor"}},
		{"unknown provider", func(w *v1alpha1.WebhookEndpoint) {
			w.Spec.Provider.Type = "PayPal"
		}, []string{"Unsupported value", "PayPal"}},
		// A name with a dot is a valid object name but cannot name the receivers'
		// Service: the endpoint would report Ready with no Service behind its URL.
		{"a name with a dot", func(w *v1alpha1.WebhookEndpoint) {
			w.Name = "orders.v2-" + w.Name
		}, []string{"metadata.name must be lower-case letters, digits and '-'", "it also names the receivers' Service"}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := validEndpoint(fmt.Sprintf("invalid-%d", i))
			tc.mutate(w)
			refused(ctx, t, c, w, tc.want...)
		})
	}
}

// hmacSpec makes w a generic HMAC endpoint with the given scheme.
func hmacSpec(w *v1alpha1.WebhookEndpoint, s v1alpha1.SchemeSpec) {
	w.Spec.Provider.Type = v1alpha1.ProviderHMAC
	w.Spec.Provider.HMAC = &v1alpha1.HMACSpec{SchemeSpec: s}
}
