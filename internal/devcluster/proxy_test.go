package devcluster

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ServiceTargetPort resolves a Service port against a Pod as kube-proxy does; send-test
// finds a receiver pod with it too.
func TestServiceTargetPort(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Ports: []corev1.ContainerPort{
		{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
		{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
		{Name: "admin", ContainerPort: 9090},
	}}}}}
	for _, tc := range []struct {
		name   string
		target intstr.IntOrString
		want   int32
		ok     bool
	}{
		{"by name", intstr.FromString("http"), 8080, true},
		{"by name, protocol unset", intstr.FromString("admin"), 9090, true},
		{"a UDP port's name", intstr.FromString("dns"), 0, false},
		{"an unknown name", intstr.FromString("grpc"), 0, false},
		{"by number", intstr.FromInt32(8443), 8443, true},
		{"unset: the Service port", intstr.IntOrString{}, 80, true},
	} {
		got, ok := ServiceTargetPort(pod, &corev1.ServicePort{Port: 80, TargetPort: tc.target})
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: ServiceTargetPort = %d, %v; want %d, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
