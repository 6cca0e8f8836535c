package controllers_test

import (
	"testing"

	. "github.com/onsi/gomega" //nolint:revive // gomega's matchers read best unqualified
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/controllers"
	"github.com/hookkeeper/hookkeeper/internal/resources"
)

// An endpoint whose receiver replicas are unavailable says what holds its pods back,
// in the order a person fixes it: the scheduler's words, the image that cannot be
// pulled, the crash and its last termination message, or readiness; not a generic
// "check the pods".
func (e *env) testReceiverPodsCause(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespace(t)
	e.withSecrets(t, ns)
	ep := e.create(t, validEndpoint(ns, "podcause"))
	e.completeJob(t, ep)
	e.waitCondition(t, ep, v1alpha1.ConditionDatabaseMigrated, metav1.ConditionTrue, controllers.ReasonMigrated)

	// Play the Deployment controller: every replica created, none available.
	d := &appsv1.Deployment{}
	g.Eventually(func(g Gomega) {
		g.Expect(e.k8s.Get(e.ctx, key(ns, resources.ReceiverName(ep)), d)).To(Succeed())
		n := *d.Spec.Replicas
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n}
		g.Expect(e.k8s.Status().Update(e.ctx, d)).To(Succeed())
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

	// Play the scheduler and the kubelet on two pods of the Deployment.
	pods := make([]*corev1.Pod, 2)
	for i := range pods {
		pods[i] = &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: d.Name + "-", Namespace: ns, Labels: d.Spec.Template.Labels},
			Spec:       *d.Spec.Template.Spec.DeepCopy(),
		}
		g.Expect(e.k8s.Create(e.ctx, pods[i])).To(Succeed())
	}
	setStatus := func(pod *corev1.Pod, status corev1.PodStatus) {
		t.Helper()
		g.Expect(e.k8s.Get(e.ctx, key(ns, pod.Name), pod)).To(Succeed())
		pod.Status = status
		g.Expect(e.k8s.Status().Update(e.ctx, pod)).To(Succeed())
	}
	expect := func(reason string, parts ...string) {
		t.Helper()
		e.reconcileNow(t, ep)
		c := condition(e.endpoint(g, ep), v1alpha1.ConditionReceiverAvailable)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(reason), c.Message)
		for _, p := range parts {
			g.Expect(c.Message).To(ContainSubstring(p))
		}
		g.Expect(c.Message).NotTo(ContainSubstring("\n"))
	}
	now := metav1.Now()
	running := func(cs corev1.ContainerStatus) corev1.PodStatus {
		return corev1.PodStatus{
			Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now},
			},
			ContainerStatuses: []corev1.ContainerStatus{cs},
		}
	}
	image := d.Spec.Template.Spec.Containers[0].Image

	// Neither pod has a status yet: the Deployment's own words.
	expect(controllers.ReasonUnavailable, "0 of 2 replicas available")

	setStatus(pods[0], running(corev1.ContainerStatus{Name: "receiver", Image: image,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff",
			Message: "Back-off pulling image \"" + image + "\""}}}))
	expect(controllers.ReasonImagePull, "1 of 2 receiver pod(s) cannot pull image "+image, pods[0].Name, "ImagePullBackOff")

	// Unschedulable comes first: nothing else can be fixed on a pod with no node.
	setStatus(pods[1], corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, LastTransitionTime: now,
		Message: "0/1 nodes are available: 1 Insufficient cpu.\npreemption: 0/1 nodes are available",
	}}})
	expect(controllers.ReasonUnschedulable, "1 of 2 receiver pod(s) cannot be scheduled", pods[1].Name, "1 Insufficient cpu. preemption")

	crash := corev1.ContainerStatus{Name: "receiver", Image: image, RestartCount: 4,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 1, Reason: "Error", Message: "open database: connect: connection refused\n"}}}
	setStatus(pods[0], running(crash))
	setStatus(pods[1], running(crash))
	expect(controllers.ReasonCrashLooping, "2 of 2 receiver pod(s) keep crashing", "restarted 4 times, last exit code 1: open database: connect: connection refused")

	ready := corev1.ContainerStatus{Name: "receiver", Image: image, Ready: false,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}
	setStatus(pods[0], running(ready))
	setStatus(pods[1], running(ready))
	expect(controllers.ReasonNotReady, "2 of 2 receiver pod(s) run but are not ready", "/readyz")
}
