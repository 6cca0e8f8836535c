package devcluster

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega" //nolint:revive // gomega's matchers read best unqualified
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

type testCluster struct {
	client kubernetes.Interface
	agent  *NodeAgent
	proxy  *ServiceProxy
}

// startTestCluster starts the control plane, a node agent that runs this test binary
// as every Pod's process, and the Service proxy; all are stopped when t ends.
func startTestCluster(t *testing.T) *testCluster {
	t.Helper()
	binDir := os.Getenv(EnvBinDir)
	if binDir == "" {
		binDir = filepath.Join("..", "..", "bin")
	}
	if _, err := resolveBinaries(binDir); err != nil {
		t.Fatalf("the local cluster tests need the control-plane binaries: %v", err)
	}
	// The cluster, the agent and the proxy print progress concurrently.
	out := &testsupport.SyncBuffer{Echo: testWriter{t}}
	begin := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	cluster, err := StartCluster(ctx, ClusterOptions{BinDir: binDir, Out: out})
	if err != nil {
		cancel()
		t.Fatalf("start cluster: %v", err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatalf("find test executable: %v", err)
	}
	agent, err := NewNodeAgent(NodeAgentOptions{
		Config:     cluster.Config(),
		Executable: self,
		BaseEnv:    []string{envHelper + "=1", "PATH=" + os.Getenv("PATH")},
		StateDir:   t.TempDir(),
		Out:        out,
		// Short, so that process restarts show within the test's budget.
		RestartBackoff:    200 * time.Millisecond,
		MaxRestartBackoff: 2 * time.Second,
		ShutdownGrace:     5 * time.Second,
	})
	if err != nil {
		t.Fatalf("new node agent: %v", err)
	}
	proxy, err := NewServiceProxy(ServiceProxyOptions{Config: cluster.Config(), Out: out})
	if err != nil {
		t.Fatalf("new service proxy: %v", err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, run := range []func(context.Context) error{agent.Run, proxy.Run} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(ctx); err != nil {
				errs <- err
			}
		}()
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("node agent or proxy: %v", err)
		}
		if err := cluster.Stop(); err != nil {
			t.Errorf("stop cluster: %v", err)
		}
	})
	select {
	case <-agent.Ready():
	case err := <-errs:
		t.Fatalf("node agent or proxy failed to start: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("node agent not ready within 30s")
	}
	<-proxy.Ready()
	t.Logf("cluster, node and proxy ready in %.1fs; pod logs in %s", time.Since(begin).Seconds(), agent.PodLogDir())
	client, err := kubernetes.NewForConfig(cluster.Config())
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	return &testCluster{client: client, agent: agent, proxy: proxy}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (c *testCluster) namespace(t *testing.T, name string) string {
	t.Helper()
	_, err := c.client.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	return name
}

// dumpLogsOnFailure prints every Pod log of the namespace when t fails.
func (c *testCluster) dumpLogsOnFailure(t *testing.T, namespace string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		matches, _ := filepath.Glob(filepath.Join(c.agent.PodLogDir(), namespace+"_*", "*.log"))
		for _, m := range matches {
			data, _ := os.ReadFile(m) //nolint:gosec // test log files
			t.Logf("--- %s\n%s", m, data)
		}
	})
}

func TestLocalCluster(t *testing.T) {
	c := startTestCluster(t)
	// The subtests share the cluster and run in parallel; the group returns when all
	// are done, before the cluster is stopped.
	t.Run("group", func(t *testing.T) {
		t.Run("DeploymentServiceSecretAndDelete", func(t *testing.T) {
			t.Parallel()
			testDeployment(t, c)
		})
		t.Run("JobSucceeds", func(t *testing.T) {
			t.Parallel()
			testJob(t, c, "job-ok", 0)
		})
		t.Run("JobFailsAfterRetry", func(t *testing.T) {
			t.Parallel()
			testJob(t, c, "job-fail", 1)
		})
		t.Run("CrashingPodRestarts", func(t *testing.T) {
			t.Parallel()
			testRestart(t, c)
		})
		t.Run("LivenessProbeRestarts", func(t *testing.T) {
			t.Parallel()
			testLiveness(t, c)
		})
	})
}

func podTemplate(labels map[string]string, restart corev1.RestartPolicy, args ...string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{
			RestartPolicy:                 restart,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](10),
			Containers: []corev1.Container{{
				Name:  "main",
				Image: "hookkeeper:dev",
				Args:  args,
				Env: []corev1.EnvVar{{
					Name:      "POD_IP",
					ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}},
				}},
			}},
		},
	}
}

func testDeployment(t *testing.T, c *testCluster) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := c.namespace(t, "deploy")
	c.dumpLogsOnFailure(t, ns)
	const secretValue = "s3cr3t-from-the-secret"
	_, err := c.client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds"},
		Data:       map[string][]byte{"token": []byte(secretValue)},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = c.client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "settings"},
		Data:       map[string]string{"mode": "fast"},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	labels := map[string]string{"app": "web"}
	tmpl := podTemplate(labels, corev1.RestartPolicyAlways, "serve", "8080")
	main := &tmpl.Spec.Containers[0]
	main.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	main.Env = append(main.Env, corev1.EnvVar{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "token"},
	}}, corev1.EnvVar{Name: "MODE", ValueFrom: &corev1.EnvVarSource{
		ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Key: "mode"},
	}}, corev1.EnvVar{Name: "NAME", ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"},
	}}, corev1.EnvVar{Name: "GREETING", Value: "$(MODE)-$(NAME)-$(UNDEFINED)"})
	// envFrom: the Secret's keys with a prefix, the ConfigMap's as they are, and an
	// optional ConfigMap that does not exist, which adds nothing.
	main.EnvFrom = []corev1.EnvFromSource{
		{Prefix: "CREDS_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}}},
		{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}},
		{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}, Optional: ptr.To(true)}},
	}
	main.ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}},
		PeriodSeconds: 1,
	}
	begin := time.Now()
	_, err = c.client.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: tmpl,
		},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = c.client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	var pods []corev1.Pod
	g.Eventually(func(g Gomega) {
		list, err := c.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		pods = nil
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && PodReady(&p) {
				pods = append(pods, p)
			}
		}
		g.Expect(pods).To(HaveLen(2))
	}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	t.Logf("2 replicas Running and Ready %.1fs after the Deployment was created", time.Since(begin).Seconds())

	g.Expect(pods[0].Status.PodIP).NotTo(Equal(pods[1].Status.PodIP))
	for _, p := range pods {
		// A loopback address of the node's /24: 127.0.0.0/24 unless another local
		// cluster on the machine holds it (the agent claims the next free one).
		g.Expect(p.Status.PodIP).To(MatchRegexp(`^127\.0\.\d+\.\d+$`))
		g.Expect(strings.Join(strings.Split(p.Status.PodIP, ".")[:3], ".")).To(
			Equal(strings.Join(strings.Split(pods[0].Status.PodIP, ".")[:3], ".")))
		g.Expect(p.Status.PodIPs).To(Equal([]corev1.PodIP{{IP: p.Status.PodIP}}))
		g.Expect(p.Spec.NodeName).To(Equal(DefaultNodeName))
		// The secretKeyRef reached the process, which listens on its own Pod IP.
		g.Expect(httpGet(t, "http://"+p.Status.PodIP+":8080/env?name=TOKEN")).To(Equal(secretValue))
		g.Expect(httpGet(t, "http://"+p.Status.PodIP+":8080/env?name=POD_IP")).To(Equal(p.Status.PodIP))
		g.Expect(httpGet(t, "http://"+p.Status.PodIP+":8080/env?name=GREETING")).To(Equal("fast-" + p.Name + "-$(UNDEFINED)"))
		g.Expect(httpGet(t, "http://"+p.Status.PodIP+":8080/env?name=CREDS_token")).To(Equal(secretValue))
		g.Expect(httpGet(t, "http://"+p.Status.PodIP+":8080/env?name=mode")).To(Equal("fast"))
	}

	// The Service proxy forwards to the ready Pods, round robin.
	addr, err := c.proxy.Addr(ns, "web", "http")
	g.Expect(err).NotTo(HaveOccurred())
	byNumber, err := c.proxy.Addr(ns, "web", "80")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(byNumber).To(Equal(addr))
	seen := map[string]bool{}
	g.Eventually(func(g Gomega) {
		seen[httpGet(t, "http://"+addr+"/")] = true
		g.Expect(seen).To(HaveKey(pods[0].Name))
		g.Expect(seen).To(HaveKey(pods[1].Name))
	}).WithTimeout(20 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())
	g.Expect(seen).To(HaveLen(2), "the proxy only reaches Pods of the Service")

	// Deleting a Pod stops its process (SIGTERM first) and removes the object.
	victim := pods[0]
	pid, err := strconv.Atoi(strings.TrimPrefix(victim.Status.ContainerStatuses[0].ContainerID, "hookkeeper-dev://"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(syscall.Kill(pid, 0)).To(Succeed(), "the pod's process runs before deletion")
	g.Expect(c.client.CoreV1().Pods(ns).Delete(ctx, victim.Name, metav1.DeleteOptions{})).To(Succeed())
	g.Eventually(func() error {
		_, err := c.client.CoreV1().Pods(ns).Get(ctx, victim.Name, metav1.GetOptions{})
		return err
	}).WithTimeout(15 * time.Second).WithPolling(100 * time.Millisecond).Should(Satisfy(apierrors.IsNotFound))
	g.Expect(errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)).To(BeTrue(), "the process is gone once the pod is")
	logData, err := os.ReadFile(c.agent.PodLogPath(&victim, "main"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(logData)).To(ContainSubstring("terminating"), "the process got SIGTERM")

	// The ReplicaSet replaces it; the proxy then reaches only live Pods.
	g.Eventually(func(g Gomega) {
		d, err := c.client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(d.Status.ReadyReplicas).To(Equal(int32(2)))
	}).WithTimeout(20 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	g.Consistently(func() string { return httpGet(t, "http://"+addr+"/") }).
		WithTimeout(time.Second).WithPolling(100 * time.Millisecond).ShouldNot(Equal(victim.Name))
}

// freshConnClient opens a connection per request, so that each request goes through the
// proxy's round robin.
var freshConnClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "error: " + err.Error()
	}
	resp, err := freshConnClient.Do(req)
	if err != nil {
		return "error: " + err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	var b bytes.Buffer
	_, _ = io.Copy(&b, resp.Body)
	return b.String()
}

func testJob(t *testing.T, c *testCluster, name string, exitCode int) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := c.namespace(t, name)
	c.dumpLogsOnFailure(t, ns)
	_, err := c.client.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](1),
			Template:     podTemplate(nil, corev1.RestartPolicyNever, "exit", strconv.Itoa(exitCode)),
		},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	want := batchv1.JobComplete
	if exitCode != 0 {
		want = batchv1.JobFailed
	}
	g.Eventually(func(g Gomega) {
		job, err := c.client.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(jobCondition(job, want)).To(BeTrue(), "job status: %+v", job.Status)
	}).WithTimeout(45 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())

	pods, err := c.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	wantPods, wantPhase := 1, corev1.PodSucceeded
	if exitCode != 0 {
		// backoffLimit 1: the first failure is retried with a new Pod.
		wantPods, wantPhase = 2, corev1.PodFailed
	}
	g.Expect(pods.Items).To(HaveLen(wantPods))
	for _, p := range pods.Items {
		g.Expect(p.Status.Phase).To(Equal(wantPhase))
		term := p.Status.ContainerStatuses[0].State.Terminated
		g.Expect(term).NotTo(BeNil())
		g.Expect(term.ExitCode).To(Equal(int32(exitCode))) //nolint:gosec // 0 or 1
		g.Expect(PodReady(&p)).To(BeFalse())
	}
}

func jobCondition(job *batchv1.Job, t batchv1.JobConditionType) bool {
	for _, c := range job.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func testRestart(t *testing.T, c *testCluster) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := c.namespace(t, "restart")
	c.dumpLogsOnFailure(t, ns)
	tmpl := podTemplate(nil, corev1.RestartPolicyAlways, "exit", "3")
	c.createPod(g, ns, "crasher", tmpl.Spec)
	g.Eventually(func(g Gomega) {
		p, cs := c.firstContainer(g, ns, "crasher")
		g.Expect(cs.RestartCount).To(BeNumerically(">=", 2))
		g.Expect(cs.LastTerminationState.Terminated).NotTo(BeNil())
		g.Expect(cs.LastTerminationState.Terminated.ExitCode).To(Equal(int32(3)))
		g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "restartPolicy Always keeps the phase Running")
	}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	g.Expect(c.client.CoreV1().Pods(ns).Delete(ctx, "crasher", metav1.DeleteOptions{})).To(Succeed())
	g.Eventually(func() error {
		_, err := c.client.CoreV1().Pods(ns).Get(ctx, "crasher", metav1.GetOptions{})
		return err
	}).WithTimeout(15 * time.Second).WithPolling(100 * time.Millisecond).Should(Satisfy(apierrors.IsNotFound))
}

func testLiveness(t *testing.T, c *testCluster) {
	g := NewWithT(t)
	ns := c.namespace(t, "liveness")
	c.dumpLogsOnFailure(t, ns)
	tmpl := podTemplate(nil, corev1.RestartPolicyAlways, "serve", "8080")
	main := &tmpl.Spec.Containers[0]
	main.ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}},
		PeriodSeconds: 1,
	}
	// Nothing listens on 9999: the liveness probe fails from the start.
	main.LivenessProbe = &corev1.Probe{
		ProbeHandler:        corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(9999)}},
		InitialDelaySeconds: 1,
		PeriodSeconds:       1,
		FailureThreshold:    2,
	}
	tmpl.Spec.TerminationGracePeriodSeconds = ptr.To[int64](2)
	c.createPod(g, ns, "unhealthy", tmpl.Spec)
	g.Eventually(func(g Gomega) {
		_, cs := c.firstContainer(g, ns, "unhealthy")
		g.Expect(cs.RestartCount).To(BeNumerically(">=", 1))
		g.Expect(cs.LastTerminationState.Terminated).NotTo(BeNil())
		g.Expect(cs.LastTerminationState.Terminated.Message).To(ContainSubstring("liveness probe failed"))
		// SIGTERM ends the helper cleanly.
		g.Expect(cs.LastTerminationState.Terminated.ExitCode).To(BeZero())
	}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	// The restarted process writes its line a moment after the restart is reported.
	logFile := filepath.Join(c.agent.PodLogDir(), podDirNameFor(t, c, ns, "unhealthy"), "main.log")
	g.Eventually(func(g Gomega) {
		logData, err := os.ReadFile(logFile)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(strings.Count(string(logData), "listening on")).To(BeNumerically(">=", 2), "the process was started again")
	}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
}

// createPod creates the Pod name in ns that runs spec.
func (c *testCluster) createPod(g Gomega, ns, name string, spec corev1.PodSpec) {
	_, err := c.client.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       *spec.DeepCopy(),
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
}

// firstContainer reads the Pod name of ns and the status of its first container; g
// fails while the Pod reports none.
func (c *testCluster) firstContainer(g Gomega, ns, name string) (*corev1.Pod, corev1.ContainerStatus) {
	p, err := c.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p.Status.ContainerStatuses).NotTo(BeEmpty())
	return p, p.Status.ContainerStatuses[0]
}

func podDirNameFor(t *testing.T, c *testCluster, ns, name string) string {
	t.Helper()
	p, err := c.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod: %v", err)
	}
	return podDirName(p)
}
