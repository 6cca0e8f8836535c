package resources

import (
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
)

// ServiceAccount is the identity of the receiver and migration pods. They never talk to
// the API server, so the token is not mounted.
func ServiceAccount(ep *v1alpha1.WebhookEndpoint) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: metav1.ObjectMeta{
			Name: ReceiverName(ep), Namespace: ep.Namespace, Labels: Labels(ep, ComponentReceiver),
		},
		AutomountServiceAccountToken: ptr.To(false),
	}
}

// Service fronts the receiver pods: webhooks on port 80 and metrics on the admin port.
func Service(ep *v1alpha1.WebhookEndpoint) *corev1.Service {
	return &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{
			Name: ReceiverName(ep), Namespace: ep.Namespace, Labels: Labels(ep, ComponentReceiver),
		},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: SelectorLabels(ep),
			Ports: []corev1.ServicePort{
				{
					Name: PortNameHTTP, Port: ServicePortHTTP, Protocol: corev1.ProtocolTCP,
					TargetPort: intstr.FromString(PortNameHTTP),
				},
				{
					Name: PortNameMetrics, Port: config.AdminPort, Protocol: corev1.ProtocolTCP,
					TargetPort: intstr.FromString(PortNameMetrics),
				},
			},
		},
	}
}

// WantsPDB reports whether ep gets a PodDisruptionBudget: only with more than one
// replica, since a budget over one pod would block node drains forever.
func WantsPDB(ep *v1alpha1.WebhookEndpoint, opts Options) bool {
	return Replicas(ep, opts) > 1
}

// PodDisruptionBudget lets voluntary disruptions take one receiver pod at a time.
func PodDisruptionBudget(ep *v1alpha1.WebhookEndpoint) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		TypeMeta: metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
		ObjectMeta: metav1.ObjectMeta{
			Name: ReceiverName(ep), Namespace: ep.Namespace, Labels: Labels(ep, ComponentReceiver),
		},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: SelectorLabels(ep)},
		},
	}
}
