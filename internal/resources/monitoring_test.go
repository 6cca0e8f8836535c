package resources

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

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
	sm := ServiceMonitor(ep)
	if sm.GetKind() != "ServiceMonitor" || sm.GetAPIVersion() != "monitoring.coreos.com/v1" {
		t.Errorf("gvk = %s", sm.GroupVersionKind())
	}
	eps := sm.Object["spec"].(map[string]any)["endpoints"].([]any)
	if eps[0].(map[string]any)["port"] != PortNameMetrics {
		t.Errorf("endpoints = %v", eps)
	}
	pr := PrometheusRule(ep)
	raw, err := json.Marshal(pr.Object)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []prometheus.Collector{metrics.OutboxOldestAge, metrics.OutboxDead, metrics.SignatureFailures, metrics.Requests, metrics.Duplicates} {
		if name := metricName(t, c); !strings.Contains(string(raw), name) {
			t.Errorf("PrometheusRule does not use %s", name)
		}
	}
	for _, alert := range []string{"HookkeeperOutboxLagging", "HookkeeperDeadLetters", "HookkeeperParkedEventsExpired", "HookkeeperGuardErrors", "HookkeeperSignatureFailureSpike", "HookkeeperDuplicateRateJump"} {
		if !strings.Contains(string(raw), alert) {
			t.Errorf("missing alert %s", alert)
		}
	}
	if !strings.Contains(string(raw), `service=\"orders-receiver\"`) {
		t.Errorf("rules must select this endpoint's series: %s", raw)
	}
}
