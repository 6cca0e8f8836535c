package resources

import (
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
)

func TestNetworkPolicy(t *testing.T) {
	for _, tc := range []struct {
		name        string
		np          v1alpha1.NetworkPolicySpec
		wantEgress  int // number of egress rules; 0 = egress not limited
		wantNSMatch bool
	}{
		{name: "defaults: metrics from own namespace", np: v1alpha1.NetworkPolicySpec{Enabled: ptr.To(true)}},
		{name: "metrics from monitoring", np: v1alpha1.NetworkPolicySpec{Enabled: ptr.To(true),
			MetricsFrom: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}}}, wantNSMatch: true},
		{name: "egress limited", np: v1alpha1.NetworkPolicySpec{Enabled: ptr.To(true), Egress: &v1alpha1.EgressSpec{
			DatabaseCIDRs: []string{"10.0.0.0/24"}, SinkCIDRs: []string{"10.1.0.0/16"}, SinkPorts: []int32{8080}}}, wantEgress: 3},
		{name: "egress database only", np: v1alpha1.NetworkPolicySpec{Enabled: ptr.To(true), Egress: &v1alpha1.EgressSpec{
			DatabaseCIDRs: []string{"10.0.0.0/24"}, DatabasePort: 6432}}, wantEgress: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := endpoint()
			ep.Spec.NetworkPolicy = tc.np
			p := NetworkPolicy(ep)
			if len(p.Spec.Ingress) != 2 {
				t.Fatalf("ingress rules = %d", len(p.Spec.Ingress))
			}
			webhook, metricsRule := p.Spec.Ingress[0], p.Spec.Ingress[1]
			if webhook.Ports[0].Port.IntValue() != config.WebhookPort || len(webhook.From) != 0 {
				t.Errorf("webhook rule = %+v (must be open to all sources)", webhook)
			}
			if metricsRule.Ports[0].Port.IntValue() != config.AdminPort || len(metricsRule.From) != 1 {
				t.Fatalf("metrics rule = %+v", metricsRule)
			}
			from := metricsRule.From[0]
			if tc.wantNSMatch != (from.NamespaceSelector != nil) || (!tc.wantNSMatch && from.PodSelector == nil) {
				t.Errorf("metrics peer = %+v", from)
			}
			if tc.wantNSMatch && (from.PodSelector != nil ||
				from.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "monitoring" ||
				from.NamespaceSelector == tc.np.MetricsFrom) {
				t.Errorf("metrics peer = %+v, want a copy of metricsFrom and no pod selector", from)
			}
			if !tc.wantNSMatch && (from.NamespaceSelector != nil || len(from.PodSelector.MatchLabels) != 0 || len(from.PodSelector.MatchExpressions) != 0) {
				t.Errorf("metrics peer = %+v, want every pod of the endpoint's namespace only", from)
			}
			if len(p.Spec.Egress) != tc.wantEgress {
				t.Errorf("egress rules = %d, want %d", len(p.Spec.Egress), tc.wantEgress)
			}
			hasEgressType := len(p.Spec.PolicyTypes) == 2
			if hasEgressType != (tc.wantEgress > 0) {
				t.Errorf("policy types = %v", p.Spec.PolicyTypes)
			}
			if tc.wantEgress > 0 {
				dns := p.Spec.Egress[0]
				if dns.Ports[0].Port.IntValue() != 53 || *dns.Ports[0].Protocol != corev1.ProtocolUDP {
					t.Errorf("first egress rule must allow DNS: %+v", dns)
				}
				db := p.Spec.Egress[1]
				wantPort := int(tc.np.Egress.DatabasePort)
				if wantPort == 0 {
					wantPort = 5432
				}
				if db.Ports[0].Port.IntValue() != wantPort || db.To[0].IPBlock.CIDR != "10.0.0.0/24" {
					t.Errorf("database rule = %+v", db)
				}
			}
		})
	}
}

// A pool's receivers are fenced like an endpoint's own: the policy selects exactly the
// pool's pods, is named and labelled as the pool's other objects, and follows the
// pool's spec.networkPolicy (on unless disabled).
func TestPoolNetworkPolicy(t *testing.T) {
	pool := &v1alpha1.WebhookReceiverPool{ObjectMeta: metav1.ObjectMeta{Name: "shared", Namespace: "hooks"}}
	rec := PoolReceivers(pool, Options{})
	if !rec.WantsNetworkPolicy() {
		t.Fatal("a pool without spec.networkPolicy must be fenced (the CRD default is enabled)")
	}
	p := rec.NetworkPolicy()
	if p.Name != PoolName("shared") || p.Namespace != "hooks" || p.Labels[LabelComponent] != ComponentPoolReceiver {
		t.Errorf("policy meta = %s/%s %v, want the pool's name, namespace and labels", p.Namespace, p.Name, p.Labels)
	}
	if got, want := p.Spec.PodSelector.MatchLabels, rec.Deployment().Spec.Selector.MatchLabels; !maps.Equal(got, want) {
		t.Errorf("pod selector = %v, want the pool Deployment's %v", got, want)
	}
	if len(p.Spec.Ingress) != 2 || len(p.Spec.Ingress[0].From) != 0 || p.Spec.Ingress[1].From[0].PodSelector == nil {
		t.Errorf("ingress = %+v, want webhooks from anywhere and metrics from the pool's namespace", p.Spec.Ingress)
	}
	if len(p.Spec.Egress) != 0 {
		t.Errorf("egress = %+v, want none without spec.networkPolicy.egress", p.Spec.Egress)
	}

	pool.Spec.NetworkPolicy.Egress = &v1alpha1.EgressSpec{DatabaseCIDRs: []string{"10.0.0.0/24"}, SinkPorts: []int32{8080}}
	if p := PoolReceivers(pool, Options{}).NetworkPolicy(); len(p.Spec.Egress) != 3 || p.Spec.Egress[1].Ports[0].Port.IntValue() != 5432 {
		t.Errorf("egress = %+v, want DNS, the database on the default port and the sink port", p.Spec.Egress)
	}
	pool.Spec.NetworkPolicy.Enabled = ptr.To(false)
	if PoolReceivers(pool, Options{}).WantsNetworkPolicy() {
		t.Error("spec.networkPolicy.enabled: false must remove the pool's policy")
	}
}
