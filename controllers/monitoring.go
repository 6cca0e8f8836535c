package controllers

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/hookkeeper/hookkeeper/internal/resources"
)

// installed reports whether the API server serves gvk right now. The manager's
// RESTMapper rediscovers a group it does not know, so CRDs installed after the operator
// started are found without a restart.
func (r *WebhookEndpointReconciler) installed(gvk schema.GroupVersionKind) (bool, error) {
	return kindInstalled(r.RESTMapper(), gvk)
}

// kindInstalled reports whether the API server serves gvk (its CRD is installed).
func kindInstalled(mapper meta.RESTMapper, gvk schema.GroupVersionKind) (bool, error) {
	_, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	switch {
	case err == nil:
		return true, nil
	case isNotInstalled(err):
		return false, nil
	default:
		return false, fmt.Errorf("discover %s: %w", gvk, err)
	}
}

// reconcileMonitoring applies the ServiceMonitor and PrometheusRule when the Prometheus
// Operator's CRDs are installed and the endpoint wants them; it never fails because
// they are absent. Both carry the operator-wide labels merged with the endpoint's.
func (r *WebhookEndpointReconciler) reconcileMonitoring(ctx context.Context, st *state) error {
	ep := st.ep
	labels := resources.MonitoringLabels(ep, r.Options.MonitoringLabels)
	for _, m := range []struct {
		gvk     schema.GroupVersionKind
		enabled bool
		build   func() *unstructured.Unstructured
	}{
		{resources.ServiceMonitorGVK, ep.Spec.Monitoring.ServiceMonitor.IsEnabled(), func() *unstructured.Unstructured { return resources.ServiceMonitor(ep, labels) }},
		{resources.PrometheusRuleGVK, ep.Spec.Monitoring.PrometheusRule.IsEnabled(), func() *unstructured.Unstructured { return resources.PrometheusRule(ep, labels) }},
	} {
		ok, err := r.installed(m.gvk)
		if err != nil {
			return err
		}
		if !ok {
			log.FromContext(ctx).V(1).Info("CRD not installed, skipping", "kind", m.gvk.Kind)
			continue
		}
		desired := m.build()
		if !m.enabled {
			if err := r.deleteOwned(ctx, ep, desired); err != nil {
				return err
			}
			continue
		}
		if err := r.ensureWatch(ctx, newWatchObject(m.gvk)); err != nil {
			return err
		}
		if _, err := r.apply(ctx, ep, desired); err != nil {
			if isNotInstalled(err) {
				// The CRD went away between discovery and apply.
				continue
			}
			return err
		}
	}
	return nil
}

func newWatchObject(gvk schema.GroupVersionKind) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u
}
