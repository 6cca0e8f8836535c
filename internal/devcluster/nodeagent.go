package devcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
)

// DefaultNodeName is the name of the one Node of the local cluster.
const DefaultNodeName = "local"

// hostIP is the node's address; Pods get their own addresses from ipPool.
const hostIP = "127.0.0.1"

// NodeAgentOptions configures a NodeAgent.
type NodeAgentOptions struct {
	// Config reaches the API server; the agent needs to manage Nodes, Leases, Pods and
	// to read Secrets and ConfigMaps.
	Config *rest.Config
	// NodeName defaults to DefaultNodeName.
	NodeName string
	// Executable runs every Pod's first container that has no command (the image's
	// entrypoint) or whose command is the image's entrypoint, /hookkeeper; the
	// container's args become its argv[1:]. The image is ignored.
	Executable string
	// Executables maps other commands (a container's command[0], a path in the
	// hookkeeper image) to local binaries; the rest of the command and the args follow
	// it. Nil means DefaultExecutables(Executable). A Pod whose command has no local
	// binary fails to start, as a missing file in the image would.
	Executables map[string]string
	// BaseEnv is given to every process before the Pod's own env (e.g. PATH, HOME).
	// Defaults to PATH, HOME and TMPDIR of this process.
	BaseEnv []string
	// StateDir receives per-Pod logs under pods/. Defaults to a temporary directory,
	// removed when Run returns.
	StateDir string
	// Out receives progress lines. Defaults to io.Discard.
	Out io.Writer
	// Log receives structured logs.
	Log logr.Logger
	// RestartBackoff is the delay before the first restart of a crashed container; it
	// doubles per restart up to MaxRestartBackoff. Defaults 1s and 1m: quicker than the
	// kubelet's 10s and 5m, because a person is waiting at the terminal.
	RestartBackoff, MaxRestartBackoff time.Duration
	// HeartbeatInterval is how often the node Lease is renewed. Defaults to 10s.
	HeartbeatInterval time.Duration
	// ShutdownGrace bounds how long Run waits for processes at shutdown before killing
	// them. Defaults to 10s.
	ShutdownGrace time.Duration
}

// The binaries of the hookkeeper image (hack/image): the full one, its entrypoint, and
// the data plane alone, which receiver and migration pods run.
const (
	ImageEntrypoint = "/hookkeeper"
	ImageReceiver   = "/hookkeeper-receiver"
)

// DefaultExecutables maps the hookkeeper image's binaries to local ones: /hookkeeper to
// executable, and /hookkeeper-receiver to the hookkeeper-receiver beside it, where
// `make build` puts it (bin/). Without one there (e.g. `go run ./cmd/hookkeeper dev`),
// /hookkeeper-receiver runs executable too, whose receiver and migrate subcommands are
// the same code (internal/dataplanecmd); only the memory differs.
func DefaultExecutables(executable string) map[string]string {
	m := map[string]string{ImageEntrypoint: executable, ImageReceiver: executable}
	if executable == "" {
		return m
	}
	receiver := filepath.Join(filepath.Dir(executable), "hookkeeper-receiver")
	if fi, err := os.Stat(receiver); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		m[ImageReceiver] = receiver
	}
	return m
}

// commandFor is the local binary and the arguments before the container's args that
// run container c: Executable for no command, else the binary Executables maps
// command[0] to, followed by the rest of the command (used as is, without $(VAR)
// expansion).
func (a *NodeAgent) commandFor(c *corev1.Container) (string, []string, error) {
	if len(c.Command) == 0 {
		return a.opts.Executable, nil, nil
	}
	exe, ok := a.opts.Executables[c.Command[0]]
	if !ok || exe == "" {
		return "", nil, fmt.Errorf("the dev node has no local binary for command %q (it runs %s)", c.Command[0], knownCommands(a.opts.Executables))
	}
	return exe, c.Command[1:], nil
}

func knownCommands(m map[string]string) string {
	return strings.Join(slices.Sorted(maps.Keys(m)), ", ")
}

// NodeAgent keeps one Node Ready and runs the Pods bound to it as local processes.
type NodeAgent struct {
	opts         NodeAgentOptions
	client       kubernetes.Interface
	pool         *ipPool
	env          envResolver
	ownsStateDir bool

	queue     workqueue.TypedRateLimitingInterface[string]
	podLister corelisters.PodLister

	mu      sync.Mutex
	runners map[string]*podRunner // by namespace/name
	// finished holds Pods whose runner is done (terminal phase), so that a stale cache
	// entry cannot start them again.
	finished map[string]types.UID
	wg       sync.WaitGroup // running podRunners

	ready     chan struct{}
	readyOnce sync.Once
}

// NewNodeAgent validates opts and builds an agent; Run starts it.
func NewNodeAgent(opts NodeAgentOptions) (*NodeAgent, error) {
	if opts.Config == nil {
		return nil, errors.New("node agent: no REST config")
	}
	if opts.Executable == "" {
		return nil, errors.New("node agent: no executable to run Pods with")
	}
	if opts.NodeName == "" {
		opts.NodeName = DefaultNodeName
	}
	if opts.Executables == nil {
		opts.Executables = DefaultExecutables(opts.Executable)
	} else if _, ok := opts.Executables[ImageEntrypoint]; !ok {
		opts.Executables = maps.Clone(opts.Executables)
		opts.Executables[ImageEntrypoint] = opts.Executable
	}
	if opts.BaseEnv == nil {
		for _, name := range []string{"PATH", "HOME", "TMPDIR"} {
			if v, ok := os.LookupEnv(name); ok {
				opts.BaseEnv = append(opts.BaseEnv, name+"="+v)
			}
		}
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	opts.Log.Info("pod commands run local binaries", "default", opts.Executable, "commands", opts.Executables)
	if opts.RestartBackoff == 0 {
		opts.RestartBackoff = time.Second
	}
	if opts.MaxRestartBackoff == 0 {
		opts.MaxRestartBackoff = time.Minute
	}
	if opts.HeartbeatInterval == 0 {
		opts.HeartbeatInterval = 10 * time.Second
	}
	if opts.ShutdownGrace == 0 {
		opts.ShutdownGrace = 10 * time.Second
	}
	a := &NodeAgent{
		runners:  map[string]*podRunner{},
		finished: map[string]types.UID{},
		ready:    make(chan struct{}),
	}
	if opts.StateDir == "" {
		dir, err := os.MkdirTemp("", "hookkeeper-node-")
		if err != nil {
			return nil, fmt.Errorf("create node state directory: %w", err)
		}
		opts.StateDir = dir
		a.ownsStateDir = true
	}
	if err := os.MkdirAll(filepath.Join(opts.StateDir, "pods"), 0o700); err != nil {
		return nil, fmt.Errorf("create pod log directory: %w", err)
	}
	client, err := kubernetes.NewForConfig(opts.Config)
	if err != nil {
		return nil, fmt.Errorf("build node agent client: %w", err)
	}
	a.opts = opts
	a.client = client
	a.env = envResolver{client: client, log: opts.Log}
	return a, nil
}

// Ready is closed once the Node is registered Ready and the Pod informer has synced.
func (a *NodeAgent) Ready() <-chan struct{} { return a.ready }

// PodLogDir is the directory holding one sub-directory of logs per Pod.
func (a *NodeAgent) PodLogDir() string { return filepath.Join(a.opts.StateDir, "pods") }

// PodLogPath is the log file of a container of a Pod (stdout and stderr together).
func (a *NodeAgent) PodLogPath(pod *corev1.Pod, container string) string {
	return filepath.Join(a.PodLogDir(), podDirName(pod), container+".log")
}

// Run registers the Node, keeps it Ready and runs its Pods until ctx is done; then it
// stops every process it started (SIGTERM, SIGKILL after ShutdownGrace).
func (a *NodeAgent) Run(ctx context.Context) error {
	log := a.opts.Log.WithValues("node", a.opts.NodeName)
	begin := time.Now()
	subnet, release, err := claimSubnet()
	if err != nil {
		return err
	}
	defer release()
	a.pool = newIPPool(subnet)
	if err := a.registerNode(ctx); err != nil {
		return err
	}
	a.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "devcluster-node-agent"})
	factory := informers.NewSharedInformerFactoryWithOptions(a.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", a.opts.NodeName).String()
		}))
	podInformer := factory.Core().V1().Pods()
	a.podLister = podInformer.Lister()
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    a.enqueue,
		UpdateFunc: func(_, obj any) { a.enqueue(obj) },
		DeleteFunc: a.enqueue,
	}); err != nil {
		return fmt.Errorf("watch pods: %w", err)
	}
	stopInformers, err := startInformers(ctx, factory, podInformer.Informer().HasSynced)
	if err != nil {
		return fmt.Errorf("sync pod informer: %w", err)
	}
	defer stopInformers()

	var heartbeat sync.WaitGroup
	heartbeat.Add(1)
	go func() {
		defer heartbeat.Done()
		a.heartbeat(ctx)
	}()
	fmt.Fprintf(a.opts.Out, "node %s ready in %.1fs; pod IPs 127.0.%d.0/24; pod logs in %s\n", a.opts.NodeName, time.Since(begin).Seconds(), subnet, a.PodLogDir())
	a.readyOnce.Do(func() { close(a.ready) })

	var workers sync.WaitGroup
	for range 2 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for a.processNext(ctx) {
			}
		}()
	}
	<-ctx.Done()
	a.queue.ShutDown()
	workers.Wait()
	heartbeat.Wait()

	log.Info("stopping pod processes")
	a.mu.Lock()
	for _, r := range a.runners {
		r.requestStop(stopRequest{grace: a.opts.ShutdownGrace, shutdown: true})
	}
	a.mu.Unlock()
	a.wg.Wait()
	if a.ownsStateDir {
		if err := os.RemoveAll(a.opts.StateDir); err != nil {
			return fmt.Errorf("remove node state directory: %w", err)
		}
	}
	return nil
}

func (a *NodeAgent) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		a.opts.Log.Error(err, "cannot key pod event")
		return
	}
	a.queue.Add(key)
}

func (a *NodeAgent) processNext(ctx context.Context) bool {
	key, shutdown := a.queue.Get()
	if shutdown {
		return false
	}
	defer a.queue.Done(key)
	if err := a.syncPod(ctx, key); err != nil {
		a.opts.Log.Error(err, "sync pod", "pod", key)
		a.queue.AddRateLimited(key)
		return true
	}
	a.queue.Forget(key)
	return true
}

// syncPod starts a runner for a new Pod, asks a runner to stop when its Pod is being
// deleted, and stops runners whose Pod vanished or was replaced by one of the same name.
func (a *NodeAgent) syncPod(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return fmt.Errorf("split key: %w", err)
	}
	pod, err := a.podLister.Pods(ns).Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("get pod from cache: %w", err)
	}
	if err != nil {
		pod = nil
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.runners[key]
	if r != nil && (pod == nil || pod.UID != r.uid) {
		// Force-deleted (or replaced): nothing is left to report to.
		r.requestStop(stopRequest{grace: 2 * time.Second, shutdown: true})
		delete(a.runners, key)
		r = nil
	}
	if pod == nil {
		delete(a.finished, key)
		return nil
	}
	if pod.DeletionTimestamp != nil {
		if r != nil {
			r.requestStop(stopRequest{grace: deletionGrace(pod), deletePod: true})
			return nil
		}
		// Never ran here, or already finished: complete the graceful delete.
		return a.finishDeletion(ctx, pod)
	}
	if r != nil || a.finished[key] == pod.UID || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil
	}
	if len(pod.Spec.Containers) == 0 {
		return nil
	}
	r = newPodRunner(a, pod)
	a.runners[key] = r
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		r.run(ctx)
		a.mu.Lock()
		if a.runners[key] == r {
			delete(a.runners, key)
		}
		a.finished[key] = r.uid
		a.mu.Unlock()
		// Let a deletion that arrived while the runner was finishing be completed.
		a.queue.Add(key)
	}()
	return nil
}

// finishDeletion does what the kubelet does once a Pod's containers are gone: delete the
// object with grace period 0, so the API server removes it (or leaves it to finalizers).
func (a *NodeAgent) finishDeletion(ctx context.Context, pod *corev1.Pod) error {
	err := a.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &pod.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("complete deletion of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

func deletionGrace(pod *corev1.Pod) time.Duration {
	if pod.DeletionGracePeriodSeconds != nil {
		return time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	}
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		return time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return 30 * time.Second
}

func (a *NodeAgent) registerNode(ctx context.Context) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: a.opts.NodeName,
		Labels: map[string]string{
			corev1.LabelHostname:   a.opts.NodeName,
			corev1.LabelOSStable:   runtime.GOOS,
			corev1.LabelArchStable: runtime.GOARCH,
		},
	}}
	if _, err := a.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("register node %s: %w", a.opts.NodeName, err)
	}
	if err := a.updateNodeStatus(ctx); err != nil {
		return err
	}
	return a.renewLease(ctx)
}

// updateNodeStatus writes capacity, addresses and fresh conditions, retrying when the
// node controller updated the Node in between.
func (a *NodeAgent) updateNodeStatus(ctx context.Context) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error { return a.tryUpdateNodeStatus(ctx) })
}

func (a *NodeAgent) tryUpdateNodeStatus(ctx context.Context) error {
	node, err := a.client.CoreV1().Nodes().Get(ctx, a.opts.NodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get node %s: %w", a.opts.NodeName, err)
	}
	now := metav1.Now()
	resources := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(totalMemory(), resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(int64(len(a.pool.free)+len(a.pool.inUse)), resource.DecimalSI),
		// Pods declare ephemeral storage requests in real manifests; the host's disk
		// is what backs them here.
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
	node.Status.Capacity = resources
	node.Status.Allocatable = resources
	node.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: hostIP},
		{Type: corev1.NodeHostName, Address: a.opts.NodeName},
	}
	node.Status.NodeInfo = corev1.NodeSystemInfo{
		OperatingSystem:         runtime.GOOS,
		Architecture:            runtime.GOARCH,
		KubeletVersion:          "v1.37.2-hookkeeper-dev",
		ContainerRuntimeVersion: "hookkeeper-dev://process",
	}
	node.Status.Conditions = []corev1.NodeCondition{
		nodeCondition(node, corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "hookkeeper dev node agent is running", now),
		nodeCondition(node, corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "not measured by the dev node agent", now),
		nodeCondition(node, corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "not measured by the dev node agent", now),
		nodeCondition(node, corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "not measured by the dev node agent", now),
	}
	if _, err := a.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsConflict(err) {
			return err //nolint:wrapcheck // RetryOnConflict needs the API error as is
		}
		return fmt.Errorf("update node %s status: %w", a.opts.NodeName, err)
	}
	return nil
}

func nodeCondition(node *corev1.Node, t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string, now metav1.Time) corev1.NodeCondition {
	transition := now
	for _, c := range node.Status.Conditions {
		if c.Type == t && c.Status == s {
			transition = c.LastTransitionTime
		}
	}
	return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: transition}
}

func totalMemory() int64 {
	var info syscall.Sysinfo_t
	if err := syscall.Sysinfo(&info); err != nil || info.Totalram == 0 {
		return 8 << 30
	}
	return int64(info.Totalram) * int64(info.Unit) //nolint:gosec // memory sizes fit in int64
}

func (a *NodeAgent) renewLease(ctx context.Context) error {
	leases := a.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	duration := int32(4 * a.opts.HeartbeatInterval / time.Second) //nolint:gosec // small
	lease, err := leases.Get(ctx, a.opts.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: a.opts.NodeName, Namespace: corev1.NamespaceNodeLease},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(a.opts.NodeName),
				LeaseDurationSeconds: ptr.To(duration),
				RenewTime:            &now,
			},
		}
		if _, err := leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create node lease: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("get node lease: %w", err)
	}
	lease.Spec.HolderIdentity = ptr.To(a.opts.NodeName)
	lease.Spec.LeaseDurationSeconds = ptr.To(duration)
	lease.Spec.RenewTime = &now
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("renew node lease: %w", err)
	}
	return nil
}

// heartbeat renews the Lease every interval and refreshes the Ready condition every
// fourth beat, well inside the node controller's grace period.
func (a *NodeAgent) heartbeat(ctx context.Context) {
	ticker := time.NewTicker(a.opts.HeartbeatInterval)
	defer ticker.Stop()
	for beat := 1; ; beat++ {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		if err := a.renewLease(ctx); err != nil && ctx.Err() == nil {
			a.opts.Log.Error(err, "node heartbeat")
		}
		if beat%4 == 0 {
			if err := a.updateNodeStatus(ctx); err != nil && ctx.Err() == nil {
				a.opts.Log.Error(err, "node status heartbeat")
			}
		}
	}
}

// podDirName is the per-Pod log directory name.
func podDirName(pod *corev1.Pod) string {
	return pod.Namespace + "_" + pod.Name + "_" + string(pod.UID)
}

// containerID names a process the way container runtimes name containers.
func containerID(pid int) string { return "hookkeeper-dev://" + strconv.Itoa(pid) }
