package resources

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// Prometheus Operator kinds. They are built as unstructured objects so the operator
// needs neither the Prometheus Operator module nor its CRDs to run.
var (
	MonitoringGroupVersion = schema.GroupVersion{Group: "monitoring.coreos.com", Version: "v1"}
	ServiceMonitorGVK      = MonitoringGroupVersion.WithKind("ServiceMonitor")
	PrometheusRuleGVK      = MonitoringGroupVersion.WithKind("PrometheusRule")
)

// Metric names from internal/metrics, used by the alert rules.
const (
	metricOldestUndelivered = "hookkeeper_outbox_oldest_undelivered_age_seconds"
	metricDeadLetters       = "hookkeeper_outbox_dead_letters"
	metricSinkDown          = "hookkeeper_outbox_sink_down"
	metricSignatureFailures = "hookkeeper_webhook_signature_failures_total"
	metricRequests          = "hookkeeper_webhook_requests_total"
	metricDuplicates        = "hookkeeper_webhook_duplicates_total"
	metricParkedExpired     = "hookkeeper_parked_expired_total"
	metricGuardErrors       = "hookkeeper_guard_errors_total"
)

func stringMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func newUnstructured(gvk schema.GroupVersionKind, name, namespace string, labels map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetGroupVersionKind(gvk)
	u.SetName(name)
	u.SetNamespace(namespace)
	u.SetLabels(labels)
	return u
}

// fixedLabelKeys are the operator's own labels, which no extra label may override.
var fixedLabelKeys = []string{LabelName, LabelInstance, LabelComponent, LabelManagedBy, LabelPartOf}

// MonitoringLabels are the labels of ep's ServiceMonitor and PrometheusRule: the
// operator-wide labels (--monitoring-labels), then the endpoint's
// spec.monitoring.labels over them, then the operator's own labels over both, so
// neither can override those.
func MonitoringLabels(ep *v1alpha1.WebhookEndpoint, operatorWide map[string]string) map[string]string {
	out := make(map[string]string, len(operatorWide)+len(ep.Spec.Monitoring.Labels)+len(fixedLabelKeys))
	for k, v := range operatorWide {
		out[k] = v
	}
	for k, v := range ep.Spec.Monitoring.Labels {
		out[k] = string(v)
	}
	for k, v := range Labels(ep, ComponentReceiver) {
		out[k] = v
	}
	return out
}

// ParseMonitoringLabels reads the manager's --monitoring-labels: comma-separated
// key=value pairs, e.g. "release=kube-prometheus-stack,team=payments". Every key must be
// a label key and every value a label value, a key may appear once, the operator's own
// app.kubernetes.io labels are refused, and there may be at most
// v1alpha1.MaxMonitoringLabels, as in an endpoint's spec.monitoring.labels.
// An empty string is no labels.
func ParseMonitoringLabels(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[string]string{}
	var errs []error
	for _, pair := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(pair, "=")
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%q is not key=value", pair))
			continue
		case slices.Contains(fixedLabelKeys, k):
			errs = append(errs, fmt.Errorf("%q is the operator's own label and cannot be set", k))
			continue
		}
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("key %q: %s", k, strings.Join(msgs, "; ")))
			continue
		}
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("value %q of %s: %s", v, k, strings.Join(msgs, "; ")))
			continue
		}
		if _, dup := out[k]; dup {
			errs = append(errs, fmt.Errorf("key %q appears twice", k))
			continue
		}
		out[k] = v
	}
	if len(out) > v1alpha1.MaxMonitoringLabels {
		errs = append(errs, fmt.Errorf("%d labels, at most %d", len(out), v1alpha1.MaxMonitoringLabels))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// monitoringObject starts a ServiceMonitor or PrometheusRule with labels (see
// MonitoringLabels); the operator's own labels are laid over them again, so a caller
// cannot drop or override those.
func monitoringObject(gvk schema.GroupVersionKind, ep *v1alpha1.WebhookEndpoint, labels map[string]string) *unstructured.Unstructured {
	merged := make(map[string]string, len(labels)+len(fixedLabelKeys))
	for k, v := range labels {
		merged[k] = v
	}
	for k, v := range Labels(ep, ComponentReceiver) {
		merged[k] = v
	}
	return newUnstructured(gvk, MonitoringName(ep), ep.Namespace, merged)
}

// ServiceMonitor scrapes the receiver Service's metrics port. honorLabels keeps the
// metrics' own `endpoint` label (the WebhookEndpoint) instead of the scrape target's.
// labels are the object's labels, MonitoringLabels(ep, operator-wide labels).
func ServiceMonitor(ep *v1alpha1.WebhookEndpoint, labels map[string]string) *unstructured.Unstructured {
	u := monitoringObject(ServiceMonitorGVK, ep, labels)
	u.Object["spec"] = map[string]any{
		"selector": map[string]any{"matchLabels": stringMap(SelectorLabels(ep))},
		"endpoints": []any{map[string]any{
			"port":        PortNameMetrics,
			"path":        "/metrics",
			"interval":    "30s",
			"honorLabels": true,
		}},
	}
	return u
}

// alertSelector selects the series scraped from this endpoint's receiver Service.
func alertSelector(ep *v1alpha1.WebhookEndpoint) string {
	return fmt.Sprintf(`namespace=%q,service=%q`, ep.Namespace, ReceiverName(ep))
}

func rule(alert, expr, forDuration, severity, summary, description string, ep *v1alpha1.WebhookEndpoint) map[string]any {
	return map[string]any{
		"alert": alert,
		"expr":  expr,
		"for":   forDuration,
		"labels": map[string]any{
			"severity": severity,
		},
		"annotations": map[string]any{
			"summary":     summary,
			"description": fmt.Sprintf("%s (WebhookEndpoint %s/%s)", description, ep.Namespace, ep.Name),
		},
	}
}

// PrometheusRule holds the endpoint's alerts: the outbox is lagging, the sink is down,
// events are dead-lettered, parked events expired, a guard fails to evaluate, signature failures spike (a wrong secret or an attack) and the share of
// duplicates jumps (the provider is retrying because acknowledgements are slow or lost).
// labels are the object's labels, MonitoringLabels(ep, operator-wide labels).
func PrometheusRule(ep *v1alpha1.WebhookEndpoint, labels map[string]string) *unstructured.Unstructured {
	sel := alertSelector(ep)
	rules := []any{
		rule("HookkeeperOutboxLagging",
			fmt.Sprintf(`max(%s{%s}) > 300`, metricOldestUndelivered, sel), "5m", "warning",
			"Outbox events are not reaching the sink",
			"The oldest undelivered outbox event is more than 5 minutes old", ep),
		rule("HookkeeperSinkDown",
			fmt.Sprintf(`max(%s{%s}) > 0`, metricSinkDown, sel), "5m", "warning",
			"The sink does not answer: deliveries are held",
			"The dispatchers hold every delivery and probe the sink once at a time; nothing is dropped or dead-lettered, and delivery resumes when it answers. The SinkHealthy condition has the last error and the backlog", ep),
		rule("HookkeeperDeadLetters",
			fmt.Sprintf(`max(%s{%s}) > 0`, metricDeadLetters, sel), "1m", "warning",
			"Outbox events were dead-lettered",
			"Some outbox events exhausted their attempts; fix the sink and run `hookkeeper replay`, or `hookkeeper discard --reason` those that must not be delivered", ep),
		rule("HookkeeperParkedEventsExpired",
			fmt.Sprintf(`sum(increase(%s{%s}[1h])) > 0`, metricParkedExpired, sel), "0m", "warning",
			"Parked webhook events expired",
			"Events waited longer than stateMachine.parkFor for their entity and will not apply by themselves; list them with `hookkeeper replay --receipts --outcome expired --dry-run`", ep),
		rule("HookkeeperGuardErrors",
			fmt.Sprintf(`sum by (transition) (increase(%s{%s}[15m])) > 0`, metricGuardErrors, sel), "0m", "warning",
			"A transition's guard fails to evaluate",
			"Events were recorded as guard_error and nothing applied; fix the guard, then run `hookkeeper replay --receipts --outcome guard_error`", ep),
		rule("HookkeeperSignatureFailureSpike",
			fmt.Sprintf(`sum(rate(%[1]s{%[2]s}[5m])) > 0.05 and sum(rate(%[1]s{%[2]s}[5m])) > 0.1 * sum(rate(%[3]s{%[2]s}[5m]))`,
				metricSignatureFailures, sel, metricRequests), "10m", "warning",
			"Many webhook requests fail signature verification",
			"More than 10% of requests fail signature verification: a rotated secret not yet in its Secret, or forged traffic", ep),
		rule("HookkeeperDuplicateRateJump",
			fmt.Sprintf(`(sum(rate(%[1]s{%[2]s}[10m])) / sum(rate(%[3]s{%[2]s}[10m]))) > 0.2 and (sum(rate(%[1]s{%[2]s}[10m])) / sum(rate(%[3]s{%[2]s}[10m]))) > 3 * (sum(rate(%[1]s{%[2]s}[1d])) / sum(rate(%[3]s{%[2]s}[1d])))`,
				metricDuplicates, sel, metricRequests), "15m", "info",
			"The share of duplicate deliveries jumped",
			"More than 20% of deliveries are duplicates, three times the daily share: the provider is retrying, check response latency", ep),
	}
	u := monitoringObject(PrometheusRuleGVK, ep, labels)
	u.Object["spec"] = map[string]any{
		"groups": []any{map[string]any{
			"name":  "hookkeeper." + ep.Namespace + "." + ep.Name,
			"rules": rules,
		}},
	}
	return u
}
