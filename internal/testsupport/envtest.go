package testsupport

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

var (
	envMu   sync.Mutex
	envOnce *envtest.Environment
	envCfg  *rest.Config
)

// RepoRoot finds the repository root (the directory holding go.mod) above the working
// directory, so tests in any package can find bin/ and config/.
func RepoRoot(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatalf("working directory: %v", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "PROJECT")); err == nil {
				return dir
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatalf("no repository root (go.mod + PROJECT) above the working directory")
		}
		dir = parent
	}
}

// BinDir is where `make` puts etcd, kube-apiserver and the other tools:
// KUBEBUILDER_ASSETS when set, else <repo>/bin.
func BinDir(tb testing.TB) string {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d
	}
	return filepath.Join(RepoRoot(tb), "bin")
}

// StartEnvtest returns the config of a real kube-apiserver (with etcd) that has
// hookkeeper's CRDs installed. One server serves the whole test package; Main stops it.
func StartEnvtest(tb testing.TB) *rest.Config {
	tb.Helper()
	envMu.Lock()
	defer envMu.Unlock()
	if envCfg != nil {
		return envCfg
	}
	bin := BinDir(tb)
	for _, name := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			tb.Fatalf("%s not found in %s: run `make test` (or `make controlplane`) to build the control-plane binaries", name, bin)
		}
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: bin,
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(tb), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	// As on the local cluster (devcluster.AdmissionPlugins), on top of the defaults:
	// only a requester that may update an owner's finalizers may set blockOwnerDeletion
	// on a reference to it. Admin requests pass; impersonated ones are checked.
	env.ControlPlane.GetAPIServer().Configure().Append("enable-admission-plugins", "OwnerReferencesPermissionEnforcement")
	cfg, err := env.Start()
	if err != nil {
		// Start may fail after etcd and the apiserver are up (e.g. a CRD is rejected):
		// stop them, or they outlive the test process.
		_ = env.Stop()
		tb.Fatalf("start envtest: %v", err)
	}
	envOnce, envCfg = env, cfg
	return cfg
}

// InstallCRDs installs extra CRDs (files or directories) into the package's envtest and
// waits until they are served.
func InstallCRDs(tb testing.TB, paths ...string) {
	tb.Helper()
	cfg := StartEnvtest(tb)
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: paths, ErrorIfPathMissing: true}); err != nil {
		tb.Fatalf("install CRDs %v: %v", paths, err)
	}
}

func stopEnvtest() {
	envMu.Lock()
	defer envMu.Unlock()
	if envOnce == nil {
		return
	}
	if err := envOnce.Stop(); err != nil && !errors.Is(err, os.ErrNotExist) {
		_, _ = os.Stderr.WriteString("stop envtest: " + err.Error() + "\n")
	}
	envOnce, envCfg = nil, nil
}
