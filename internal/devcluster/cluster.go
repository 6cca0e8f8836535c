package devcluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/hookkeeper/hookkeeper/internal/loopback"
)

// ClusterOptions configures a Cluster.
type ClusterOptions struct {
	// BinDir holds etcd (or `server`), kube-apiserver, kube-controller-manager and
	// kube-scheduler. Defaults to DefaultBinDir().
	BinDir string
	// StateDir receives the admin kubeconfig and the control-plane logs. Defaults to a
	// new temporary directory, removed by Stop.
	StateDir string
	// CRDDirs are installed once the API server is up (e.g. config/crd/bases).
	CRDDirs []string
	// Out receives one progress line per started component. Defaults to io.Discard.
	Out io.Writer
	// StartTimeout bounds the start of each component. Defaults to 60s.
	StartTimeout time.Duration
}

// AdmissionPlugins are enabled on the local kube-apiserver on top of its defaults
// (a comma-separated list, as --enable-admission-plugins takes it).
const AdmissionPlugins = "OwnerReferencesPermissionEnforcement"

// Cluster is a running local control plane.
type Cluster struct {
	opts         ClusterOptions
	env          *envtest.Environment
	config       *rest.Config
	kubeconfig   string
	ownsStateDir bool
	children     []*childComponent
	logFiles     []*os.File
}

type childComponent struct {
	name string
	proc *process
}

// StartCluster starts etcd and kube-apiserver, writes an admin kubeconfig, installs the
// CRDs, then starts kube-controller-manager and kube-scheduler and waits until each is
// healthy. On error everything already started is stopped.
func StartCluster(ctx context.Context, opts ClusterOptions) (_ *Cluster, err error) {
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 60 * time.Second
	}
	if opts.BinDir == "" {
		if opts.BinDir, err = DefaultBinDir(); err != nil {
			return nil, err
		}
	}
	bins, err := resolveBinaries(opts.BinDir)
	if err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts}
	if c.opts.StateDir == "" {
		if c.opts.StateDir, err = os.MkdirTemp("", "hookkeeper-dev-"); err != nil {
			return nil, fmt.Errorf("create state directory: %w", err)
		}
		c.ownsStateDir = true
	}
	defer func() {
		if err != nil {
			_ = c.Stop()
		}
	}()
	if err := os.MkdirAll(c.LogDir(), 0o700); err != nil {
		return nil, fmt.Errorf("create log directory: %w", err)
	}

	begin := time.Now()
	c.env = &envtest.Environment{
		BinaryAssetsDirectory:    opts.BinDir,
		CRDDirectoryPaths:        opts.CRDDirs,
		ErrorIfCRDPathMissing:    len(opts.CRDDirs) > 0,
		ControlPlaneStartTimeout: opts.StartTimeout,
		ControlPlaneStopTimeout:  20 * time.Second,
	}
	c.env.ControlPlane.GetAPIServer().Path = bins.apiServer
	// In addition to the default plugins (envtest disables only ServiceAccount):
	// OwnerReferencesPermissionEnforcement, on in OpenShift, lets only a requester that
	// may update an owner's finalizers set blockOwnerDeletion on a reference to it.
	c.env.ControlPlane.GetAPIServer().Configure().Append("enable-admission-plugins", AdmissionPlugins)
	apiLog, err := c.openLog(binAPIServer)
	if err != nil {
		return nil, err
	}
	c.env.ControlPlane.GetAPIServer().Out, c.env.ControlPlane.GetAPIServer().Err = apiLog, apiLog
	etcdLog, err := c.openLog(binEtcd)
	if err != nil {
		return nil, err
	}
	c.env.ControlPlane.Etcd = &envtest.Etcd{Path: bins.etcd, Out: etcdLog, Err: etcdLog}
	if _, err := c.env.Start(); err != nil {
		return nil, fmt.Errorf("start etcd and kube-apiserver: %w", err)
	}
	admin, err := c.env.AddUser(envtest.User{Name: "hookkeeper-dev-admin", Groups: []string{"system:masters"}},
		&rest.Config{QPS: 200, Burst: 400})
	if err != nil {
		return nil, fmt.Errorf("add admin user: %w", err)
	}
	c.config = admin.Config()
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		return nil, fmt.Errorf("render admin kubeconfig: %w", err)
	}
	c.kubeconfig = filepath.Join(c.opts.StateDir, "kubeconfig")
	if err := os.WriteFile(c.kubeconfig, kubeconfig, 0o600); err != nil {
		return nil, fmt.Errorf("write kubeconfig: %w", err)
	}
	fmt.Fprintf(opts.Out, "etcd + kube-apiserver up in %.1fs (%s)\n", time.Since(begin).Seconds(), c.config.Host)

	kubeconfigFlags := []string{
		"--kubeconfig=" + c.kubeconfig,
		"--authentication-kubeconfig=" + c.kubeconfig,
		"--authorization-kubeconfig=" + c.kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
	}
	begin = time.Now()
	if err := c.startChild(ctx, binControllerManager, bins.controllerManager, append([]string{
		// Pods run without API tokens (the receiver needs none), so the token
		// controller, which needs the service-account signing key, stays off; the
		// serviceaccount controller still creates each namespace's default account.
		//
		// The endpoints and endpointslice controllers stay off too: Pods on the dev
		// node have loopback IPs, which the API server refuses in Endpoints and
		// EndpointSlices, so those controllers would only retry and fill the Events
		// of every Service with warnings. The Service proxy selects Pods itself.
		"--controllers=*,-serviceaccount-token,-endpoints-controller,-endpointslice-controller",
		"--use-service-account-credentials=false",
		// No pod CIDRs: the node agent hands out loopback addresses itself.
		"--allocate-node-cidrs=false",
		"--cluster-name=hookkeeper-dev",
	}, kubeconfigFlags...)); err != nil {
		return nil, err
	}
	fmt.Fprintf(opts.Out, "kube-controller-manager up in %.1fs\n", time.Since(begin).Seconds())

	begin = time.Now()
	if err := c.startChild(ctx, binScheduler, bins.scheduler, kubeconfigFlags); err != nil {
		return nil, err
	}
	fmt.Fprintf(opts.Out, "kube-scheduler up in %.1fs\n", time.Since(begin).Seconds())
	return c, nil
}

// openLog opens the log file of a component that envtest starts; Stop closes it.
func (c *Cluster) openLog(name string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(c.LogDir(), name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600) //nolint:gosec // our own state directory
	if err != nil {
		return nil, fmt.Errorf("open %s log: %w", name, err)
	}
	c.logFiles = append(c.logFiles, f)
	return f, nil
}

// startChild starts a component with its own secure port on a free loopback port and
// waits until its /healthz answers ok.
func (c *Cluster) startChild(ctx context.Context, name, path string, args []string) error {
	port, err := loopback.FreePort(ctx)
	if err != nil {
		return err
	}
	certDir := filepath.Join(c.opts.StateDir, name+"-certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return fmt.Errorf("create %s cert directory: %w", name, err)
	}
	args = append(args, "--secure-port="+strconv.Itoa(port), "--cert-dir="+certDir)
	// Not CommandContext: the component is stopped by Stop (SIGTERM, then SIGKILL to its
	// process group), not by the start context.
	proc, err := startProcess(exec.Command(path, args...), filepath.Join(c.LogDir(), name+".log")) //nolint:gosec,noctx // see above; path comes from the binary directory
	if err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	c.children = append(c.children, &childComponent{name: name, proc: proc})
	healthz := fmt.Sprintf("https://127.0.0.1:%d/healthz", port)
	if err := waitHealthy(ctx, proc, healthz, c.opts.StartTimeout); err != nil {
		return fmt.Errorf("%s did not become healthy (log: %s): %w", name, filepath.Join(c.LogDir(), name+".log"), err)
	}
	return nil
}

func waitHealthy(ctx context.Context, proc *process, url string, timeout time.Duration) error {
	client := &http.Client{
		Timeout: 2 * time.Second,
		// The component serves a self-signed certificate generated at start; only
		// its liveness is checked here, nothing is sent.
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // see above
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	var lastErr error
	for {
		if proc.exited() {
			return fmt.Errorf("exited with status %d", proc.exitCode())
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("build health request: %w", err)
		}
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			lastErr = fmt.Errorf("healthz answered %s", resp.Status)
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w (last: %w)", url, ctx.Err(), lastErr)
		case <-ticker.C:
		}
	}
}

// Config returns the admin REST config.
func (c *Cluster) Config() *rest.Config { return rest.CopyConfig(c.config) }

// KubeconfigPath returns the path of the admin kubeconfig file.
func (c *Cluster) KubeconfigPath() string { return c.kubeconfig }

// StateDir returns the directory holding the kubeconfig and the logs.
func (c *Cluster) StateDir() string { return c.opts.StateDir }

// LogDir returns the directory of the control-plane logs.
func (c *Cluster) LogDir() string { return filepath.Join(c.opts.StateDir, "logs") }

// Stop stops the scheduler, the controller manager, kube-apiserver and etcd, and
// removes the state directory if Cluster created it.
func (c *Cluster) Stop() error {
	var errs []error
	for i := len(c.children) - 1; i >= 0; i-- {
		c.children[i].proc.stop(10 * time.Second)
	}
	c.children = nil
	if c.env != nil {
		if err := c.env.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stop etcd and kube-apiserver: %w", err))
		}
		c.env = nil
	}
	for _, f := range c.logFiles {
		_ = f.Close()
	}
	c.logFiles = nil
	if c.ownsStateDir {
		if err := os.RemoveAll(c.opts.StateDir); err != nil {
			errs = append(errs, fmt.Errorf("remove state directory: %w", err))
		}
		c.ownsStateDir = false
	}
	return errors.Join(errs...)
}
