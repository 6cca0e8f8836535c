package resources

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/metrics"
)

func metricName(t *testing.T, c prometheus.Collector) string {
	t.Helper()
	ch := make(chan *prometheus.Desc, 1)
	c.Describe(ch)
	desc := (<-ch).String()
	start := strings.Index(desc, `fqName: "`) + len(`fqName: "`)
	return desc[start : start+strings.Index(desc[start:], `"`)]
}

func TestMonitoring(t *testing.T) {
	ep := endpoint()
	sm := ServiceMonitor(ep, MonitoringLabels(ep, nil))
	if sm.GetKind() != "ServiceMonitor" || sm.GetAPIVersion() != "monitoring.coreos.com/v1" {
		t.Errorf("gvk = %s", sm.GroupVersionKind())
	}
	eps := sm.Object["spec"].(map[string]any)["endpoints"].([]any)
	if eps[0].(map[string]any)["port"] != PortNameMetrics {
		t.Errorf("endpoints = %v", eps)
	}
	pr := PrometheusRule(ep, MonitoringLabels(ep, nil))
	raw, err := json.Marshal(pr.Object)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []prometheus.Collector{metrics.OutboxOldestAge, metrics.OutboxDead, metrics.SinkDown, metrics.SignatureFailures, metrics.Requests, metrics.Duplicates} {
		if name := metricName(t, c); !strings.Contains(string(raw), name) {
			t.Errorf("PrometheusRule does not use %s", name)
		}
	}
	for _, alert := range []string{"HookkeeperOutboxLagging", "HookkeeperSinkDown", "HookkeeperDeadLetters", "HookkeeperParkedEventsExpired", "HookkeeperGuardErrors", "HookkeeperSignatureFailureSpike", "HookkeeperDuplicateRateJump"} {
		if !strings.Contains(string(raw), alert) {
			t.Errorf("missing alert %s", alert)
		}
	}
	if !strings.Contains(string(raw), `service=\"orders-receiver\"`) {
		t.Errorf("rules must select this endpoint's series: %s", raw)
	}
}

// The endpoint's labels win over the operator-wide ones, and the operator's own labels
// win over both, on the ServiceMonitor and the PrometheusRule alike.
func TestMonitoringLabels(t *testing.T) {
	ep := endpoint()
	ep.Spec.Monitoring.Labels = map[string]v1alpha1.LabelValue{"release": "prom-payments", "team": "payments"}
	operatorWide := map[string]string{"release": "kube-prometheus-stack", "tier": "ops", LabelManagedBy: "someone-else"}
	want := map[string]string{"release": "prom-payments", "team": "payments", "tier": "ops"}
	maps.Copy(want, Labels(ep, ComponentReceiver))
	labels := MonitoringLabels(ep, operatorWide)
	if !maps.Equal(labels, want) {
		t.Errorf("MonitoringLabels = %v, want %v", labels, want)
	}
	// A caller that passes other labels still cannot drop or override the fixed ones.
	sneaky := map[string]string{"release": "x", LabelInstance: "other"}
	for _, build := range []func(*v1alpha1.WebhookEndpoint, map[string]string) map[string]string{
		func(ep *v1alpha1.WebhookEndpoint, l map[string]string) map[string]string {
			return ServiceMonitor(ep, l).GetLabels()
		},
		func(ep *v1alpha1.WebhookEndpoint, l map[string]string) map[string]string {
			return PrometheusRule(ep, l).GetLabels()
		},
	} {
		if got := build(ep, labels); !maps.Equal(got, want) {
			t.Errorf("labels = %v, want %v", got, want)
		}
		got := build(ep, sneaky)
		if got["release"] != "x" || got[LabelInstance] != Labels(ep, ComponentReceiver)[LabelInstance] || got[LabelManagedBy] != ManagedBy {
			t.Errorf("fixed labels overridden: %v", got)
		}
	}
	// Without any extra labels the objects carry the operator's labels only.
	ep.Spec.Monitoring.Labels = nil
	if got := ServiceMonitor(ep, MonitoringLabels(ep, nil)).GetLabels(); !maps.Equal(got, Labels(ep, ComponentReceiver)) {
		t.Errorf("labels = %v", got)
	}
}

func TestParseMonitoringLabels(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    map[string]string
		wantErr string
	}{
		{in: "", want: nil},
		{in: "release=kube-prometheus-stack,example.com/team=x,empty=", want: map[string]string{
			"release": "kube-prometheus-stack", "example.com/team": "x", "empty": ""}},
		{in: "release", wantErr: `"release" is not key=value`},
		{in: "release=a,,team=b", wantErr: `"" is not key=value`},
		{in: "release=a,release=b", wantErr: "appears twice"},
		{in: "bad key=x", wantErr: `key "bad key"`},
		{in: "release=-x", wantErr: `value "-x" of release`},
		{in: "app.kubernetes.io/managed-by=me", wantErr: "operator's own label"},
	} {
		got, err := ParseMonitoringLabels(tc.in)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%q: %v", tc.in, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%q: error %v, want one containing %s", tc.in, err, tc.wantErr)
		case tc.wantErr == "" && !maps.Equal(got, tc.want):
			t.Errorf("%q = %v, want %v", tc.in, got, tc.want)
		}
	}
	var many []string
	for i := range v1alpha1.MaxMonitoringLabels + 1 {
		many = append(many, fmt.Sprintf("l%d=v", i))
	}
	if _, err := ParseMonitoringLabels(strings.Join(many, ",")); err == nil || !strings.Contains(err.Error(), "at most 16") {
		t.Errorf("17 labels: %v", err)
	}
}
