package resources

import (
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/hookkeeper/hookkeeper/internal/config"
)

// ServiceAccount is the identity of the receiver pods (and of an endpoint's migration
// pods). They never talk to the API server, so the token is not mounted.
func (r Receivers) ServiceAccount() *corev1.ServiceAccount {
	return &corev1.ServiceAccount{
		TypeMeta:                     metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta:                   r.objectMeta(),
		AutomountServiceAccountToken: ptr.To(false),
	}
}

// Service fronts the receiver pods: webhooks on port 80 and metrics on the admin port.
func (r Receivers) Service() *corev1.Service {
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: r.objectMeta(),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: r.Selector,
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

// WantsPDB reports whether the receivers get a PodDisruptionBudget: only when more
// than one replica runs (at least), since a budget over one pod would block node drains
// forever.
func (r Receivers) WantsPDB() bool {
	if a := r.Autoscaling; a != nil {
		return a.MinReplicas == nil || *a.MinReplicas > 1
	}
	return r.Replicas > 1
}

// PodDisruptionBudget lets voluntary disruptions take one receiver pod at a time.
func (r Receivers) PodDisruptionBudget() *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
		ObjectMeta: r.objectMeta(),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: r.Selector},
		},
	}
}

// HorizontalPodAutoscaler scales the receivers' Deployment on CPU between
// autoscaling.minReplicas and maxReplicas; nil without autoscaling. The Deployment then
// leaves replicas unset (Receivers.Deployment), so the operator never fights it.
func (r Receivers) HorizontalPodAutoscaler() *autoscalingv2.HorizontalPodAutoscaler {
	a := r.Autoscaling
	if a == nil {
		return nil
	}
	a = a.DeepCopy()
	a.Default()
	return &autoscalingv2.HorizontalPodAutoscaler{
		TypeMeta:   metav1.TypeMeta{APIVersion: "autoscaling/v2", Kind: "HorizontalPodAutoscaler"},
		ObjectMeta: r.objectMeta(),
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: r.Name},
			MinReplicas:    a.MinReplicas,
			MaxReplicas:    a.MaxReplicas,
			Metrics: []autoscalingv2.MetricSpec{{
				Type: autoscalingv2.ResourceMetricSourceType,
				Resource: &autoscalingv2.ResourceMetricSource{
					Name: corev1.ResourceCPU,
					Target: autoscalingv2.MetricTarget{
						Type:               autoscalingv2.UtilizationMetricType,
						AverageUtilization: a.TargetCPUUtilizationPercentage,
					},
				},
			}},
		},
	}
}
