package resources

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
)

// WantsNetworkPolicy reports whether ep's receiver pods are fenced.
func WantsNetworkPolicy(ep *v1alpha1.WebhookEndpoint) bool {
	return EndpointReceivers(ep, Options{}).WantsNetworkPolicy()
}

// WantsNetworkPolicy reports whether the receiver pods are fenced.
func (r Receivers) WantsNetworkPolicy() bool {
	return r.NetworkPolicySpec.IsEnabled()
}

func tcpPort(p int32) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{
		Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(p)),
	}
}

func cidrPeers(cidrs []string) []networkingv1.NetworkPolicyPeer {
	peers := make([]networkingv1.NetworkPolicyPeer, 0, len(cidrs))
	for _, c := range cidrs {
		peers = append(peers, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: c}})
	}
	return peers
}

// NetworkPolicy fences ep's receiver pods.
func NetworkPolicy(ep *v1alpha1.WebhookEndpoint) *networkingv1.NetworkPolicy {
	return EndpointReceivers(ep, Options{}).NetworkPolicy()
}

// NetworkPolicy admits webhooks on the webhook port from anywhere (providers call from
// the internet, through whatever ingress) and metrics only from the namespaces selected
// by metricsFrom, or from the receivers' own namespace when unset. With egress the pods
// may only reach DNS, the database and the sink.
func (r Receivers) NetworkPolicy() *networkingv1.NetworkPolicy {
	np := r.NetworkPolicySpec
	metricsPeer := networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{}}
	if np.MetricsFrom != nil {
		metricsPeer = networkingv1.NetworkPolicyPeer{NamespaceSelector: np.MetricsFrom.DeepCopy()}
	}
	policy := &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: r.objectMeta(),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: r.Selector},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{
				{Ports: []networkingv1.NetworkPolicyPort{tcpPort(config.WebhookPort)}},
				{
					Ports: []networkingv1.NetworkPolicyPort{tcpPort(config.AdminPort)},
					From:  []networkingv1.NetworkPolicyPeer{metricsPeer},
				},
			},
		},
	}
	if eg := np.Egress; eg != nil {
		policy.Spec.PolicyTypes = append(policy.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
		policy.Spec.Egress = egressRules(eg)
	}
	return policy
}

// egressRules allow DNS, the database port and the sink ports. An empty CIDR list leaves
// that destination's port open to any address; empty sinkPorts allow every port of the
// sink CIDRs.
func egressRules(eg *v1alpha1.EgressSpec) []networkingv1.NetworkPolicyEgressRule {
	dbPort := eg.DatabasePort
	if dbPort == 0 {
		dbPort = v1alpha1.DefaultDatabasePort
	}
	rules := []networkingv1.NetworkPolicyEgressRule{
		{Ports: []networkingv1.NetworkPolicyPort{
			{Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To(intstr.FromInt32(53))},
			tcpPort(53),
		}},
		{Ports: []networkingv1.NetworkPolicyPort{tcpPort(dbPort)}, To: cidrPeers(eg.DatabaseCIDRs)},
	}
	if len(eg.SinkCIDRs) > 0 || len(eg.SinkPorts) > 0 {
		sink := networkingv1.NetworkPolicyEgressRule{To: cidrPeers(eg.SinkCIDRs)}
		for _, p := range eg.SinkPorts {
			sink.Ports = append(sink.Ports, tcpPort(p))
		}
		rules = append(rules, sink)
	}
	for i := range rules {
		if len(rules[i].To) == 0 {
			rules[i].To = nil
		}
	}
	return rules
}
