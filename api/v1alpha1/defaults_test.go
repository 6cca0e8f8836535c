package v1alpha1_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// The CRD's +kubebuilder:default markers cannot name the Go constants, so this test is
// what binds them: every minimal endpoint below, stored by a real API server and read
// back, must equal the same endpoint defaulted by WebhookEndpointSpec.Default. The cases
// reach every optional object that has defaults of its own (hmac, its composite, ed25519, refetch, serviceRef,
// entity.table, networkPolicy.egress). It also keeps GitOps tools free of drift: what
// they apply is what they read back, defaults included.
func TestDefaultsMatchTheAPIServer(t *testing.T) {
	c, ctx := newClient(t)

	ref := func(n, k string) corev1.SecretKeySelector {
		return corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: n}, Key: k}
	}
	cases := map[string]func(*v1alpha1.WebhookEndpoint){
		"minimal": func(*v1alpha1.WebhookEndpoint) {},
		"hmac provider": func(w *v1alpha1.WebhookEndpoint) {
			w.Spec.Provider = v1alpha1.ProviderSpec{Type: v1alpha1.ProviderHMAC, HMAC: &v1alpha1.HMACSpec{SchemeSpec: v1alpha1.SchemeSpec{Header: "X-Signature"}}}
		},
		"hmac composite provider": func(w *v1alpha1.WebhookEndpoint) {
			w.Spec.Provider = v1alpha1.ProviderSpec{Type: v1alpha1.ProviderHMAC, HMAC: &v1alpha1.HMACSpec{SchemeSpec: v1alpha1.SchemeSpec{
				Header: "Paddle-Signature", SignedContent: "{timestamp}:{body}", Composite: &v1alpha1.CompositeSpec{TimestampKey: "ts", SignatureKey: "h1"},
			}}}
		},
		"ed25519 provider": func(w *v1alpha1.WebhookEndpoint) {
			w.Spec.Provider = v1alpha1.ProviderSpec{Type: v1alpha1.ProviderEd25519, Ed25519: &v1alpha1.Ed25519Spec{SchemeSpec: v1alpha1.SchemeSpec{Header: "X-Signature-Ed25519"}}}
		},
		"refetch, serviceRef, app table, egress": func(w *v1alpha1.WebhookEndpoint) {
			w.Spec.Provider.Refetch = &v1alpha1.RefetchSpec{APIKeySecretRef: ref("stripe", "api-key"), Transitions: []string{"capture"}}
			w.Spec.Delivery.Sink = v1alpha1.SinkSpec{ServiceRef: &v1alpha1.ServiceReference{Name: "fulfilment"}}
			w.Spec.Entity.Table = &v1alpha1.EntityTableSpec{Name: "orders", KeyColumn: "id", StateColumn: "status"}
			w.Spec.NetworkPolicy.Egress = &v1alpha1.EgressSpec{}
		},
		"autoscaling": func(w *v1alpha1.WebhookEndpoint) {
			w.Spec.Receiver.Autoscaling = &v1alpha1.AutoscalingSpec{MaxReplicas: 4}
		},
	}
	i := 0
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			in := validEndpoint(fmt.Sprintf("defaults-%d", i))
			i++
			mutate(in)
			want := in.Spec.DeepCopy()
			want.Default()
			if reflect.DeepEqual(*want, in.Spec) {
				t.Fatal("Default changed nothing in a minimal endpoint")
			}

			var got v1alpha1.WebhookEndpoint
			stored(ctx, t, c, in, &got)
			if !reflect.DeepEqual(got.Spec, *want) {
				t.Fatalf("the API server's defaults differ from WebhookEndpointSpec.Default (-apiserver +go):\n%s",
					jsonDiff(t, got.Spec, *want))
			}

			again := want.DeepCopy()
			again.Default()
			if !reflect.DeepEqual(*again, *want) {
				t.Errorf("Default is not idempotent:\n%s", jsonDiff(t, *want, *again))
			}
		})
	}
}

// A WebhookReceiverPool's defaults, as the API server stores them, equal
// WebhookReceiverPoolSpec.Default's, with and without autoscaling and egress rules.
func TestPoolDefaultsMatchTheAPIServer(t *testing.T) {
	c, ctx := newClient(t)
	for i, spec := range []v1alpha1.WebhookReceiverPoolSpec{
		{},
		{Autoscaling: &v1alpha1.AutoscalingSpec{MaxReplicas: 5}},
		{NetworkPolicy: v1alpha1.NetworkPolicySpec{Egress: &v1alpha1.EgressSpec{}}},
	} {
		in := &v1alpha1.WebhookReceiverPool{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pool-defaults-%d", i), Namespace: "default"}, Spec: spec}
		want := spec.DeepCopy()
		want.Default()
		var got v1alpha1.WebhookReceiverPool
		stored(ctx, t, c, in, &got)
		if !reflect.DeepEqual(got.Spec, *want) {
			t.Errorf("pool %d: the API server's defaults differ from WebhookReceiverPoolSpec.Default (-apiserver +go):\n%s", i, jsonDiff(t, got.Spec, *want))
		}
	}
}

// The CRD's validation markers cannot name the Go constants either: this test reads the
// generated CRD and checks each limit Go validation repeats against its constant.
func TestLimitsMatchTheCRD(t *testing.T) {
	field := crdSpec(t, "hookkeeper.dev_webhookendpoints.yaml")
	checkLimits(t, field, []crdLimit{
		{"signingSecrets", "minItems", int64(v1alpha1.MinSigningSecrets)},
		{"signingSecrets", "maxItems", int64(v1alpha1.MaxSigningSecrets)},
		{"database.schema", "pattern", v1alpha1.SchemaPattern},
		{"database.maxConnections", "minimum", int64(v1alpha1.MinMaxConnections)},
		{"database.maxConnections", "maximum", int64(v1alpha1.MaxMaxConnections)},
		{"entity.table.schema", "maxLength", int64(v1alpha1.MaxIdentifierLength)},
		{"entity.table.name", "maxLength", int64(v1alpha1.MaxIdentifierLength)},
		{"entity.table.keyColumn", "maxLength", int64(v1alpha1.MaxIdentifierLength)},
		{"entity.table.stateColumn", "maxLength", int64(v1alpha1.MaxIdentifierLength)},
		{"entity.table.amountColumn", "maxLength", int64(v1alpha1.MaxIdentifierLength)},
		{"entity.table.tenant.column", "maxLength", int64(v1alpha1.MaxIdentifierLength)},
		{"delivery.sink.serviceRef.port", "minimum", int64(v1alpha1.MinPort)},
		{"delivery.sink.serviceRef.port", "maximum", int64(v1alpha1.MaxPort)},
		{"delivery.maxAttempts", "minimum", int64(v1alpha1.MinMaxAttempts)},
		{"delivery.maxAttempts", "maximum", int64(v1alpha1.MaxMaxAttempts)},
		{"delivery.concurrency", "minimum", int64(v1alpha1.MinConcurrency)},
		{"delivery.concurrency", "maximum", int64(v1alpha1.MaxConcurrency)},
		{"receiver.maxBodyBytes", "minimum", int64(v1alpha1.MinMaxBodyBytes)},
		{"receiver.maxBodyBytes", "maximum", int64(v1alpha1.MaxMaxBodyBytes)},
		{"receiver.maxInFlight", "minimum", int64(v1alpha1.MinMaxInFlight)},
		{"receiver.maxInFlight", "maximum", int64(v1alpha1.MaxMaxInFlight)},
		{"monitoring.labels", "maxProperties", int64(v1alpha1.MaxMonitoringLabels)},
	})

	// Duration ranges are CEL rules; their bounds must be the constants.
	hours := func(d time.Duration) string { return strings.TrimSuffix(d.String(), "0m0s") }
	celRules := []struct{ field, want string }{
		{"stateMachine.parkFor", fmt.Sprintf("duration(self) <= duration('%s')", hours(v1alpha1.MaxParkFor))},
		{"retention.payloadFor", fmt.Sprintf("duration(self) >= duration('%s') && duration(self) <= duration('%s')", hours(v1alpha1.MinRetention), hours(v1alpha1.MaxRetention))},
		{"retention.dedupeFor", fmt.Sprintf("duration(self) >= duration('%s') && duration(self) <= duration('%s')", hours(v1alpha1.MinRetention), hours(v1alpha1.MaxRetention))},
		{"retention.deliveredFor", fmt.Sprintf("duration(self) >= duration('%s') && duration(self) <= duration('%s')", hours(v1alpha1.MinRetention), hours(v1alpha1.MaxRetention))},
	}
	for _, c := range celRules {
		rules, _ := field(c.field)["x-kubernetes-validations"].([]any)
		found := false
		for _, r := range rules {
			if rule, _ := r.(map[string]any)["rule"].(string); strings.Contains(rule, c.want) {
				found = true
			}
		}
		if !found {
			t.Errorf("spec.%s: no CEL rule contains %q: %v", c.field, c.want, rules)
		}
	}
}

// crdSpec reads a generated CRD of config/crd/bases and returns a lookup of its spec's
// schema by dotted field path ("database.maxConnections"); a missing field fails t.
func crdSpec(t *testing.T, file string) func(dotted string) map[string]any {
	t.Helper()
	path := filepath.Join(testsupport.RepoRoot(t), "config", "crd", "bases", file)
	data, err := os.ReadFile(path) //nolint:gosec // a fixed path in the repository
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema["properties"].(map[string]any)["spec"].(map[string]any)
	return func(dotted string) map[string]any {
		t.Helper()
		node := spec
		for p := range strings.SplitSeq(dotted, ".") {
			props, _ := node["properties"].(map[string]any)
			next, ok := props[p].(map[string]any)
			if !ok {
				t.Fatalf("%s has no spec.%s", file, dotted)
			}
			node = next
		}
		return node
	}
}

// crdLimit is one schema keyword of a spec field and the Go constant it must equal.
type crdLimit struct {
	field, keyword string
	want           any
}

// checkLimits compares each limit with the CRD (JSON numbers as int64).
func checkLimits(t *testing.T, field func(string) map[string]any, limits []crdLimit) {
	t.Helper()
	for _, l := range limits {
		got := field(l.field)[l.keyword]
		if f, ok := got.(float64); ok {
			got = int64(f)
		}
		if got != l.want {
			t.Errorf("spec.%s %s: the CRD says %v, the Go constant %v", l.field, l.keyword, got, l.want)
		}
	}
}

// jsonDiff shows the lines of the two values' indented JSON that differ, with a few
// lines of context: enough to name the field.
func jsonDiff(t *testing.T, a, b any) string {
	t.Helper()
	lines := func(v any) []string {
		out, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(string(out), "\n")
	}
	la, lb := lines(a), lines(b)
	// Longest common subsequence, then walk it: small documents, so O(n*m) is fine.
	n, m := len(la), len(lb)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if la[i] == lb[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var ops []string
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && la[i] == lb[j]:
			ops = append(ops, "  "+la[i])
			i++
			j++
		case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]):
			ops = append(ops, "- "+la[i])
			i++
		default:
			ops = append(ops, "+ "+lb[j])
			j++
		}
	}
	// Print the changed lines with three lines of context each.
	var sb strings.Builder
	last := -1
	for k, op := range ops {
		near := false
		for d := -3; d <= 3; d++ {
			if k+d >= 0 && k+d < len(ops) && ops[k+d][0] != ' ' {
				near = true
			}
		}
		if !near {
			continue
		}
		if last >= 0 && k > last+1 {
			sb.WriteString("  ...\n")
		}
		sb.WriteString(op + "\n")
		last = k
	}
	return sb.String()
}

// A pool's name names its Service too: a dotted name is refused at admission.
func TestPoolNameMustNameAService(t *testing.T) {
	c, ctx := newClient(t)
	pool := &v1alpha1.WebhookReceiverPool{ObjectMeta: metav1.ObjectMeta{Name: "shared.eu", Namespace: "default"}}
	refused(ctx, t, c, pool, "metadata.name must be lower-case letters")
}
