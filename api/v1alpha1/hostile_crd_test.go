package v1alpha1_test

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// The refetch API key goes to baseURL: admission refuses plain http unless
// allowInsecureHTTP says it is a local stand-in.
func TestCRDRefetchBaseURLNeedsHTTPSOrAllowInsecureHTTP(t *testing.T) {
	c, ctx := newClient(t)
	cases := []struct {
		name, baseURL string
		insecure      bool
		reject        bool
	}{
		{"default API", "", false, false},
		{"https", "https://stripe-proxy.internal", false, false},
		{"http", "http://evil.example", false, true},
		{"HTTP upper case", "HTTP://evil.example", false, true},
		{"http with allowInsecureHTTP", "http://127.0.0.1:8081", true, false},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := validEndpoint("refetch-url-" + string(rune('a'+i)))
			w.Spec.Provider.Refetch = &v1alpha1.RefetchSpec{
				APIKeySecretRef:   corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "stripe-api"}, Key: "key"},
				BaseURL:           tc.baseURL,
				AllowInsecureHTTP: tc.insecure,
				Transitions:       []string{"capture"},
			}
			if tc.reject {
				refused(ctx, t, c, w, "allowInsecureHTTP")
			} else {
				admitted(ctx, t, c, w)
			}
		})
	}
}

// receiver.maxInFlight defaults to 64 and stays within 1..4096.
func TestCRDMaxInFlightDefaultAndBounds(t *testing.T) {
	c, ctx := newClient(t)
	var got v1alpha1.WebhookEndpoint
	stored(ctx, t, c, validEndpoint("max-in-flight-default"), &got)
	if got.Spec.Receiver.MaxInFlight != 64 {
		t.Errorf("receiver.maxInFlight defaulted to %d, want 64", got.Spec.Receiver.MaxInFlight)
	}
	for i, n := range []int32{-1, 4097} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			w := validEndpoint("max-in-flight-" + string(rune('a'+i)))
			w.Spec.Receiver.MaxInFlight = n
			refused(ctx, t, c, w, "maxInFlight")
		})
	}
}

// An endpoint's receipts live in its schema: moving it to another (empty) schema would
// let every re-sent event apply again, so admission refuses the change, including the
// one that drops the field and lets its default apply. Other database fields may change.
func TestCRDDatabaseSchemaIsImmutable(t *testing.T) {
	c, ctx := newClient(t)
	w := validEndpoint("schema-immutable")
	w.Spec.Database.Schema = "payments"
	var cur v1alpha1.WebhookEndpoint
	stored(ctx, t, c, w, &cur)
	for _, schema := range []string{"payments_v2", ""} {
		moved := cur.DeepCopy()
		moved.Spec.Database.Schema = schema
		err := c.Update(ctx, moved)
		if err == nil {
			t.Fatalf("admission accepted moving the endpoint from schema payments to %q", schema)
		}
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "schema is immutable") {
			t.Fatalf("schema %q: want an Invalid error saying the schema is immutable, got %v", schema, err)
		}
	}
	cur.Spec.Database.MaxConnections = 20
	cur.Spec.Database.URLSecretRef.Key = "uri-rotated"
	if err := c.Update(ctx, &cur); err != nil {
		t.Fatalf("changing maxConnections and the URL's Secret key: %v", err)
	}
}

// The operator's informer decodes every WebhookEndpoint into Go: one duration it cannot
// parse ("ten", "1 second") failed the list and the watch, and the operator then
// reconciled no endpoint at all, with nothing on the bad object to say why. Admission
// refuses such a duration in every duration field, and a zero or negative one where
// only a positive one makes sense.
func TestCRDRefusesDurationsTheOperatorCannotRead(t *testing.T) {
	c, ctx := newClient(t)
	fields := [][]string{
		{"provider", "tolerance"},
		{"provider", "refetch", "timeout"},
		{"delivery", "timeout"},
		{"delivery", "backoff", "initial"},
		{"delivery", "backoff", "max"},
		{"stateMachine", "parkFor"},
		{"retention", "payloadFor"},
		{"retention", "dedupeFor"},
		{"retention", "deliveredFor"},
	}
	positive := map[string]bool{"tolerance": true, "timeout": true, "initial": true, "max": true}
	for i, path := range fields {
		values := []string{"ten", "1 second", "5 minutes"}
		if positive[path[len(path)-1]] {
			values = append(values, "0s", "-1s")
		}
		for j, value := range values {
			name := fmt.Sprintf("duration-%d-%d", i, j)
			t.Run(strings.Join(path, ".")+"="+value, func(t *testing.T) {
				w := validEndpoint(name)
				w.Spec.Provider.Refetch = &v1alpha1.RefetchSpec{
					APIKeySecretRef: corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "stripe-api"}, Key: "key"},
					Transitions:     []string{"capture"},
				}
				obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(w)
				if err != nil {
					t.Fatal(err)
				}
				u := &unstructured.Unstructured{Object: obj}
				u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("WebhookEndpoint"))
				if err := unstructured.SetNestedField(u.Object, value, append([]string{"spec"}, path...)...); err != nil {
					t.Fatal(err)
				}
				refused(ctx, t, c, u, "spec."+strings.Join(path, "."))
			})
		}
	}
}
