package devcluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// EnvBinDir overrides the directory holding the control-plane binaries.
const EnvBinDir = "HOOKKEEPER_BIN_DIR"

// Control-plane binary names looked up in the binary directory.
const (
	binEtcd              = "etcd"
	binAPIServer         = "kube-apiserver"
	binControllerManager = "kube-controller-manager"
	binScheduler         = "kube-scheduler"
	// binEtcdFallback is the name `go build` gives go.etcd.io/etcd/server/v3 when the
	// build does not name its output.
	binEtcdFallback = "server"
)

// DefaultBinDir returns $HOOKKEEPER_BIN_DIR, else <repo>/bin where <repo> is the nearest
// directory at or above the working directory that holds a go.mod.
func DefaultBinDir() (string, error) {
	if dir := os.Getenv(EnvBinDir); dir != "" {
		return dir, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin"), nil
}

// RepoRoot returns the nearest directory at or above the working directory that holds a
// go.mod file.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("get working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find repository root: no go.mod at or above the working directory")
		}
		dir = parent
	}
}

// binaries are the resolved paths of the control-plane executables.
type binaries struct {
	etcd, apiServer, controllerManager, scheduler string
}

func resolveBinaries(dir string) (binaries, error) {
	var b binaries
	var missing []string
	find := func(names ...string) string {
		for _, name := range names {
			p := filepath.Join(dir, name)
			info, err := os.Stat(p) //nolint:gosec // the binary directory is the user's own configuration
			if err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
				return p
			}
		}
		missing = append(missing, names[0])
		return ""
	}
	b.etcd = find(binEtcd, binEtcdFallback)
	b.apiServer = find(binAPIServer)
	b.controllerManager = find(binControllerManager)
	b.scheduler = find(binScheduler)
	if len(missing) > 0 {
		return b, fmt.Errorf("control-plane binaries %v not found in %s (build them with `make controlplane`, or set --bin-dir / $%s)", missing, dir, EnvBinDir)
	}
	return b, nil
}
