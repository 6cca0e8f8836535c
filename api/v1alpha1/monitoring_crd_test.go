package v1alpha1_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// spec.monitoring.labels takes at most 16 Kubernetes label keys and values, and never
// the operator's own app.kubernetes.io labels.
func TestCRDMonitoringLabels(t *testing.T) {
	c, ctx := newClient(t)
	many := map[string]v1alpha1.LabelValue{}
	for i := range 17 {
		many[fmt.Sprintf("l%d", i)] = "x"
	}
	cases := []struct {
		name   string
		labels map[string]v1alpha1.LabelValue
		reject string // a substring of the error; empty means accepted
	}{
		{"release label", map[string]v1alpha1.LabelValue{"release": "kube-prometheus-stack", "example.com/team": "payments", "empty": ""}, ""},
		{"longest name and prefix", map[string]v1alpha1.LabelValue{strings.Repeat("a", 253) + "/" + strings.Repeat("b", 63): v1alpha1.LabelValue(strings.Repeat("c", 63))}, ""},
		{"too many", many, "16"},
		{"bad key", map[string]v1alpha1.LabelValue{"no spaces": "x"}, "label keys"},
		{"name too long", map[string]v1alpha1.LabelValue{strings.Repeat("a", 64): "x"}, "label keys"},
		{"prefix too long", map[string]v1alpha1.LabelValue{strings.Repeat("a", 254) + "/b": "x"}, "label keys"},
		{"bad value", map[string]v1alpha1.LabelValue{"release": "-x"}, "spec.monitoring.labels.release"},
		{"value too long", map[string]v1alpha1.LabelValue{"release": v1alpha1.LabelValue(strings.Repeat("v", 64))}, "spec.monitoring.labels.release"},
		{"operator's own label", map[string]v1alpha1.LabelValue{"app.kubernetes.io/managed-by": "me"}, "operator's own labels"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := validEndpoint("monitoring-labels-" + string(rune('a'+i)))
			w.Spec.Monitoring.Labels = tc.labels
			if tc.reject != "" {
				refused(ctx, t, c, w, tc.reject)
			} else {
				admitted(ctx, t, c, w)
			}
		})
	}
}
