package controllers

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Reasons of ReceiverAvailable=False that name what keeps the receiver pods from
// serving, read from the pods themselves (receiverPodsCause).
const (
	ReasonUnschedulable = "Unschedulable"
	ReasonImagePull     = "ImagePullFailing"
	ReasonCrashLooping  = "CrashLooping"
	ReasonNotReady      = "NotReady"
)

// imagePullReasons are the container waiting reasons of an image that cannot be pulled.
var imagePullReasons = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true, "ErrImageNeverPull": true,
}

// podCause is why one pod does not serve, by the order a person fixes them in.
type podCause struct {
	rank    int // 1 unschedulable, 2 image pull, 3 crash loop, 4 not ready
	reason  string
	message string
}

// receiverPodsCause reads the pods of the receiver Deployment and names the first cause,
// in the order a person fixes them (cannot be scheduled, cannot pull the image, crashes,
// runs but is not ready), with how many pods it holds back and the scheduler's, the
// image's or the last crash's own words. It returns no reason when the pods cannot be
// read or none has a cause (no pods yet): the caller keeps its Deployment-level message.
func (r *WebhookEndpointReconciler) receiverPodsCause(ctx context.Context, d *appsv1.Deployment) (reason, message string) {
	if d.Spec.Selector == nil || len(d.Spec.Selector.MatchLabels) == 0 {
		return "", ""
	}
	var pods corev1.PodList
	if err := r.reader().List(ctx, &pods, client.InNamespace(d.Namespace), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil {
		return "", ""
	}
	var first *podCause
	count := map[int]int{}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if !pod.DeletionTimestamp.IsZero() || pod.Status.Phase == corev1.PodSucceeded {
			continue
		}
		c := causeOf(pod)
		if c == nil {
			continue
		}
		count[c.rank]++
		if first == nil || c.rank < first.rank {
			first = c
		}
	}
	if first == nil {
		return "", ""
	}
	return first.reason, fmt.Sprintf("%d of %d receiver pod(s) %s", count[first.rank], len(pods.Items), first.message)
}

// causeOf is why pod does not serve, or nil when it is ready.
func causeOf(pod *corev1.Pod) *podCause {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return &podCause{1, ReasonUnschedulable, fmt.Sprintf("cannot be scheduled (%s): %s", pod.Name, oneLine(c.Message))}
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && imagePullReasons[w.Reason] {
			return &podCause{2, ReasonImagePull, fmt.Sprintf("cannot pull image %s (%s: %s): %s", cs.Image, pod.Name, w.Reason, oneLine(w.Message))}
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		last := cs.LastTerminationState.Terminated
		if w := cs.State.Waiting; w != nil && w.Reason == "CrashLoopBackOff" || last != nil && last.ExitCode != 0 && !cs.Ready {
			msg := fmt.Sprintf("keep crashing (%s: container %s restarted %d times", pod.Name, cs.Name, cs.RestartCount)
			if last != nil {
				msg += fmt.Sprintf(", last exit code %d", last.ExitCode)
				if m := oneLine(last.Message); m != "" {
					msg += ": " + m
				}
			}
			return &podCause{3, ReasonCrashLooping, msg + ")"}
		}
	}
	if pod.Status.Phase == corev1.PodRunning {
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status != corev1.ConditionTrue {
				return &podCause{4, ReasonNotReady, fmt.Sprintf("run but are not ready (%s): /readyz needs the database and the schema at this version; see the pod's log", pod.Name)}
			}
		}
	}
	return nil
}
