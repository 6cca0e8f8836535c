package devcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/hookkeeper/hookkeeper/internal/dataplanecmd"
)

// notRun is the reason reported for containers the agent does not run: it runs each
// Pod's first container only, since every Pod is a process of a hookkeeper binary.
const notRun = "NotRunByDevNode"

type stopRequest struct {
	grace time.Duration
	// deletePod completes the Pod's graceful deletion once its process is gone.
	deletePod bool
	// shutdown means the agent is going away or the Pod object is gone: stop the
	// process and write nothing more to the API.
	shutdown bool
}

// runResult is the outcome of one start of the container.
type runResult struct {
	started  bool
	exitCode int
	stop     *stopRequest
}

// podRunner owns the process of one Pod: it starts it, probes it, restarts it per the
// restart policy and reports the Pod's status.
type podRunner struct {
	agent *NodeAgent
	pod   *corev1.Pod // as first seen; the fields used here are immutable
	uid   types.UID
	log   logr.Logger
	ip    netip.Addr

	stopCh chan stopRequest

	mu          sync.Mutex // guards the status fields below
	phase       corev1.PodPhase
	startTime   *metav1.Time
	state       corev1.ContainerState
	lastState   corev1.ContainerState
	restarts    int32
	everStarted bool
	containerID string
	started     bool // startup probe passed (or none)
	ready       bool

	statusMu sync.Mutex // serialises status writes

	unsupportedProbeOnce sync.Once
}

func newPodRunner(a *NodeAgent, pod *corev1.Pod) *podRunner {
	return &podRunner{
		agent:  a,
		pod:    pod.DeepCopy(),
		uid:    pod.UID,
		log:    a.opts.Log.WithValues("pod", pod.Namespace+"/"+pod.Name),
		stopCh: make(chan stopRequest, 1),
		phase:  corev1.PodPending,
		state:  corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}},
	}
}

// requestStop asks the runner to stop; the first request wins.
func (r *podRunner) requestStop(req stopRequest) {
	select {
	case r.stopCh <- req:
	default:
	}
}

func (r *podRunner) run(ctx context.Context) {
	want, _ := netip.ParseAddr(r.pod.Status.PodIP)
	ip, err := r.agent.pool.reserve(want)
	if err != nil {
		r.setWaiting("NetworkNotReady", err.Error())
		r.writeStatus(ctx)
		r.finish(ctx, <-r.stopCh, runResult{exitCode: 1})
		return
	}
	r.ip = ip
	defer func() {
		if err := r.agent.pool.release(ip); err != nil {
			r.log.Error(err, "release pod IP")
		}
	}()
	r.mu.Lock()
	r.startTime = ptr.To(metav1.Now())
	r.mu.Unlock()
	if len(r.pod.Spec.Containers) > 1 || len(r.pod.Spec.InitContainers) > 0 {
		r.log.Info("only the first container of a Pod runs on the dev node", "container", r.pod.Spec.Containers[0].Name)
	}
	r.writeStatus(ctx)

	backoff := r.agent.opts.RestartBackoff
	for {
		begin := time.Now()
		res := r.runOnce(ctx)
		if res.stop != nil {
			r.finish(ctx, *res.stop, res)
			return
		}
		if res.started && !shouldRestart(r.pod.Spec.RestartPolicy, res.exitCode) {
			r.mu.Lock()
			r.phase = terminalPhase(res.exitCode)
			r.mu.Unlock()
			r.writeStatus(ctx)
			return
		}
		if res.started && time.Since(begin) > 2*r.agent.opts.MaxRestartBackoff {
			backoff = r.agent.opts.RestartBackoff
		}
		if res.started {
			r.setWaiting("CrashLoopBackOff", fmt.Sprintf("back-off %s restarting failed container", backoff))
			r.writeStatus(ctx)
		}
		timer := time.NewTimer(backoff)
		select {
		case <-timer.C:
		case req := <-r.stopCh:
			timer.Stop()
			r.finish(ctx, req, res)
			return
		}
		backoff = min(2*backoff, r.agent.opts.MaxRestartBackoff)
	}
}

// terminationMessage is what the kubelet reports for an exited container: the file the
// process wrote, else (FallbackToLogsOnError, a failure) the tail of its log.
func terminationMessage(c *corev1.Container, msgPath, logPath string, exitCode int) string {
	const maxMessage, maxLogLines = 4096, 80
	if b, err := os.ReadFile(msgPath); err == nil && len(bytes.TrimSpace(b)) > 0 { //nolint:gosec // the agent's own file
		return string(b[:min(len(b), maxMessage)])
	}
	if exitCode == 0 || c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
		return ""
	}
	b, err := os.ReadFile(logPath) //nolint:gosec // the agent's own file
	if err != nil {
		return ""
	}
	b = bytes.TrimRight(b[max(0, len(b)-2048):], "\n")
	lines := bytes.Split(b, []byte("\n"))
	return string(bytes.Join(lines[max(0, len(lines)-maxLogLines):], []byte("\n")))
}

func shouldRestart(policy corev1.RestartPolicy, exitCode int) bool {
	switch policy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return exitCode != 0
	default:
		return true
	}
}

func terminalPhase(exitCode int) corev1.PodPhase {
	if exitCode == 0 {
		return corev1.PodSucceeded
	}
	return corev1.PodFailed
}

// finish reports the terminal phase of a Pod being deleted and completes the deletion.
func (r *podRunner) finish(ctx context.Context, req stopRequest, last runResult) {
	if req.shutdown || !req.deletePod {
		return
	}
	r.mu.Lock()
	if r.phase != corev1.PodSucceeded && r.phase != corev1.PodFailed {
		code := last.exitCode
		if !last.started && !r.everStarted {
			code = 1
		}
		r.phase = terminalPhase(code)
	}
	r.mu.Unlock()
	r.writeStatus(ctx)
	if err := r.agent.finishDeletion(ctx, r.pod); err != nil {
		r.log.Error(err, "complete pod deletion")
	}
}

// runOnce resolves the environment, starts the process and waits until it exits, a
// liveness (or startup) probe gives up on it, or a stop is requested.
func (r *podRunner) runOnce(ctx context.Context) runResult {
	c := &r.pod.Spec.Containers[0]
	env, args, err := r.agent.env.resolve(ctx, r.pod, c, r.ip.String(), hostIP)
	if err != nil {
		r.setWaiting("CreateContainerConfigError", err.Error())
		r.writeStatus(ctx)
		return runResult{}
	}
	logPath := r.agent.PodLogPath(r.pod, c.Name)
	if err := os.MkdirAll(filepath.Dir(logPath), 0o700); err != nil {
		r.setWaiting("RunContainerError", fmt.Sprintf("create log directory: %v", err))
		r.writeStatus(ctx)
		return runResult{}
	}
	exe, prefix, err := r.agent.commandFor(c)
	if err != nil {
		r.setWaiting("RunContainerError", err.Error())
		r.writeStatus(ctx)
		return runResult{}
	}
	// Secret volumes: written under the pod's directory, kept current while the
	// process runs, and the mount paths in args and env pointed there.
	mounts := secretMounts(r.pod, c, filepath.Dir(logPath))
	for _, m := range mounts {
		if err := r.agent.refreshSecret(ctx, r.pod.Namespace, m); err != nil {
			r.setWaiting("ContainerCreating", err.Error())
			r.writeStatus(ctx)
			return runResult{}
		}
	}
	rewriteMounts(mounts, args, env)
	mountCtx, stopMounts := context.WithCancel(ctx)
	defer stopMounts()
	go r.agent.keepSecretsCurrent(mountCtx, r.pod.Namespace, mounts, func(err error) {
		r.log.Error(err, "refresh a Secret volume")
	})
	// Not CommandContext: the process lives until its Pod is deleted or the agent
	// stops, and is then stopped gracefully (SIGTERM, grace period, SIGKILL).
	cmd := exec.Command(exe, append(slices.Clone(prefix), args...)...) //nolint:gosec,noctx // see above; the executable is the agent's configuration
	cmd.Env = append(slices.Clone(r.agent.opts.BaseEnv), "HOSTNAME="+r.pod.Name)
	cmd.Env = append(cmd.Env, env...)
	// The container's terminationMessagePath, which a process cannot be given as a
	// mount: hookkeeper's commands write why they failed where this variable says.
	msgPath := logPath + ".termination-log"
	_ = os.Remove(msgPath)
	cmd.Env = append(cmd.Env, dataplanecmd.EnvTerminationMessagePath+"="+msgPath)
	cmd.Dir = filepath.Dir(logPath)
	proc, err := startProcess(cmd, logPath)
	if err != nil {
		r.setWaiting("RunContainerError", err.Error())
		r.writeStatus(ctx)
		return runResult{}
	}
	startedAt := metav1.Now()
	id := containerID(proc.pid())
	r.mu.Lock()
	if r.everStarted {
		r.restarts++
	}
	r.everStarted = true
	r.containerID = id
	r.phase = corev1.PodRunning
	r.state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: startedAt}}
	r.started = c.StartupProbe == nil
	r.ready = r.started && c.ReadinessProbe == nil
	r.mu.Unlock()
	r.log.V(1).Info("container started", "pid", proc.pid(), "ip", r.ip.String())
	r.writeStatus(ctx)

	probeCtx, stopProbes := context.WithCancel(ctx)
	probeFailed := make(chan string, 1)
	var probes sync.WaitGroup
	probes.Add(1)
	go func() {
		defer probes.Done()
		r.probe(probeCtx, c, probeFailed)
	}()

	res := runResult{started: true}
	message := ""
	select {
	case <-proc.done:
	case msg := <-probeFailed:
		message = msg
		r.log.Info("restarting container: probe failed", "detail", msg)
		proc.stop(probeGrace(r.pod, c))
	case req := <-r.stopCh:
		res.stop = &req
		proc.stop(req.grace)
	}
	stopProbes()
	probes.Wait()
	proc.signalGroup(syscall.SIGKILL) // children the process left behind
	res.exitCode = proc.exitCode()

	reason := "Completed"
	if res.exitCode != 0 {
		reason = "Error"
	}
	if message == "" {
		message = terminationMessage(c, msgPath, logPath, res.exitCode)
	}
	terminated := &corev1.ContainerStateTerminated{
		ExitCode:    int32(res.exitCode), //nolint:gosec // exit codes are small
		Reason:      reason,
		Message:     message,
		StartedAt:   startedAt,
		FinishedAt:  metav1.Now(),
		ContainerID: id,
	}
	r.mu.Lock()
	r.state = corev1.ContainerState{Terminated: terminated}
	r.lastState = corev1.ContainerState{Terminated: terminated.DeepCopy()}
	r.ready = false
	r.mu.Unlock()
	if res.stop == nil || !res.stop.shutdown {
		r.writeStatus(ctx)
	}
	return res
}

func probeGrace(pod *corev1.Pod, c *corev1.Container) time.Duration {
	if c.LivenessProbe != nil && c.LivenessProbe.TerminationGracePeriodSeconds != nil {
		return time.Duration(*c.LivenessProbe.TerminationGracePeriodSeconds) * time.Second
	}
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		return time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return 30 * time.Second
}

func (r *podRunner) setWaiting(reason, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}
	r.ready = false
}

func (r *podRunner) setReady(ready bool) {
	r.mu.Lock()
	changed := r.ready != ready
	r.ready = ready
	r.mu.Unlock()
	if changed {
		r.writeStatus(context.Background())
	}
}

func (r *podRunner) setStarted() {
	r.mu.Lock()
	r.started = true
	r.mu.Unlock()
}

// writeStatus writes the runner's view of the Pod into its status, retrying on
// conflicts; it changes nothing when the status is already current.
func (r *podRunner) writeStatus(ctx context.Context) {
	r.statusMu.Lock()
	defer r.statusMu.Unlock()
	pods := r.agent.client.CoreV1().Pods(r.pod.Namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod, err := pods.Get(ctx, r.pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("get pod: %w", err)
		}
		if pod.UID != r.uid {
			return nil
		}
		status := r.buildStatus(&pod.Status)
		if equality.Semantic.DeepEqual(status, &pod.Status) {
			return nil
		}
		pod.Status = *status
		_, err = pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err //nolint:wrapcheck // RetryOnConflict needs the API error as is
	})
	if err != nil && !errors.Is(err, context.Canceled) && ctx.Err() == nil {
		r.log.Error(err, "update pod status")
	}
}

func (r *podRunner) buildStatus(old *corev1.PodStatus) *corev1.PodStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := old.DeepCopy()
	s.Phase = r.phase
	s.HostIP = hostIP
	s.HostIPs = []corev1.HostIP{{IP: hostIP}}
	if r.ip.IsValid() {
		s.PodIP = r.ip.String()
		s.PodIPs = []corev1.PodIP{{IP: s.PodIP}}
	}
	if s.StartTime == nil {
		s.StartTime = r.startTime
	}
	terminal := r.phase == corev1.PodSucceeded || r.phase == corev1.PodFailed
	ready := r.ready && !terminal
	readyReason := ""
	if !ready {
		readyReason = "ContainersNotReady"
		if terminal {
			readyReason = "PodCompleted"
		}
	}
	now := metav1.Now()
	setPodCondition(s, corev1.PodReadyToStartContainers, r.ip.IsValid() && !terminal, "", now)
	setPodCondition(s, corev1.PodInitialized, true, "", now)
	setPodCondition(s, corev1.ContainersReady, ready, readyReason, now)
	setPodCondition(s, corev1.PodReady, ready, readyReason, now)

	main := r.pod.Spec.Containers[0]
	exe, _, err := r.agent.commandFor(&main)
	if err != nil {
		exe = r.agent.opts.Executable
	}
	statuses := []corev1.ContainerStatus{{
		Name:                 main.Name,
		Image:                main.Image,
		ImageID:              "hookkeeper-dev://" + exe,
		State:                *r.state.DeepCopy(),
		LastTerminationState: *r.lastStateForStatus(),
		Ready:                ready,
		RestartCount:         r.restarts,
		Started:              ptr.To(r.state.Running != nil && r.started),
		ContainerID:          r.containerID,
	}}
	for _, c := range r.pod.Spec.Containers[1:] {
		statuses = append(statuses, corev1.ContainerStatus{
			Name:  c.Name,
			Image: c.Image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
				Reason: notRun, Message: "the dev node agent runs only the first container of a Pod",
			}},
			Started: ptr.To(false),
		})
	}
	s.ContainerStatuses = statuses
	if len(r.pod.Spec.InitContainers) > 0 {
		s.InitContainerStatuses = nil
		for _, c := range r.pod.Spec.InitContainers {
			s.InitContainerStatuses = append(s.InitContainerStatuses, corev1.ContainerStatus{
				Name:  c.Name,
				Image: c.Image,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					Reason: notRun, Message: "init containers are skipped by the dev node agent",
				}},
				Ready:   true,
				Started: ptr.To(false),
			})
		}
	}
	return s
}

// lastStateForStatus is the previous termination, reported only once the container
// has been restarted (before that, the current state is the termination).
func (r *podRunner) lastStateForStatus() *corev1.ContainerState {
	if r.state.Terminated != nil {
		return &corev1.ContainerState{}
	}
	return r.lastState.DeepCopy()
}

func setPodCondition(s *corev1.PodStatus, t corev1.PodConditionType, ok bool, reason string, now metav1.Time) {
	status := corev1.ConditionFalse
	if ok {
		status = corev1.ConditionTrue
	}
	for i := range s.Conditions {
		c := &s.Conditions[i]
		if c.Type != t {
			continue
		}
		if c.Status != status {
			c.Status = status
			c.LastTransitionTime = now
		}
		c.Reason = reason
		return
	}
	s.Conditions = append(s.Conditions, corev1.PodCondition{Type: t, Status: status, Reason: reason, LastTransitionTime: now})
}
