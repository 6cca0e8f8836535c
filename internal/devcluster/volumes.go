package devcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// secretRefreshInterval is how often a mounted Secret is read again; the kubelet's
// sync period is a minute, this is quicker so the local cluster shows changes fast.
const secretRefreshInterval = time.Second

// mountedSecret is one Secret volume of a container: where the process sees it (the
// mount path, rewritten in its args and env to dir) and where its files are.
type mountedSecret struct {
	secret    string
	optional  bool
	mode      os.FileMode
	mountPath string
	dir       string
	version   string
}

// secretMounts lists the container's Secret volume mounts; other volume kinds are left
// out (the local cluster's processes see the host's file system). Each gets a directory
// under podDir.
func secretMounts(pod *corev1.Pod, c *corev1.Container, podDir string) []*mountedSecret {
	var out []*mountedSecret
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Spec.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			mode := os.FileMode(0o644)
			if v.Secret.DefaultMode != nil {
				mode = os.FileMode(*v.Secret.DefaultMode)
			}
			out = append(out, &mountedSecret{
				secret: v.Secret.SecretName, optional: isOptional(v.Secret.Optional), mode: mode | 0o400,
				mountPath: m.MountPath, dir: filepath.Join(podDir, "volumes", v.Name),
			})
		}
	}
	return out
}

// rewriteMounts replaces each mount path in args and env values with its directory on
// this machine: a process cannot be given a mount, so it is told where the files are.
func rewriteMounts(mounts []*mountedSecret, args, env []string) {
	for _, m := range mounts {
		for i := range args {
			args[i] = strings.ReplaceAll(args[i], m.mountPath, m.dir)
		}
		for i := range env {
			if name, value, ok := strings.Cut(env[i], "="); ok {
				env[i] = name + "=" + strings.ReplaceAll(value, m.mountPath, m.dir)
			}
		}
	}
}

// refresh writes the Secret's current data into the mount's directory when its
// resourceVersion changed.
func (a *NodeAgent) refreshSecret(ctx context.Context, ns string, m *mountedSecret) error {
	s, err := a.client.CoreV1().Secrets(ns).Get(ctx, m.secret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && m.optional {
		return writeAtomic(m.dir, nil, m.mode)
	}
	if err != nil {
		return fmt.Errorf("MountVolume.SetUp failed for Secret %q: %w", m.secret, err)
	}
	if s.ResourceVersion == m.version {
		return nil
	}
	if err := writeAtomic(m.dir, s.Data, m.mode); err != nil {
		return fmt.Errorf("write Secret %q: %w", m.secret, err)
	}
	m.version = s.ResourceVersion
	return nil
}

// keepSecretsCurrent refreshes every mount until ctx ends, as the kubelet's sync does.
func (a *NodeAgent) keepSecretsCurrent(ctx context.Context, ns string, mounts []*mountedSecret, log func(error)) {
	if len(mounts) == 0 {
		return
	}
	t := time.NewTicker(secretRefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, m := range mounts {
			if err := a.refreshSecret(ctx, ns, m); err != nil && ctx.Err() == nil {
				log(err)
			}
		}
	}
}

// writeAtomic replaces dir's files with data the way the kubelet's atomic writer does:
// the files live in a fresh hidden directory ..<time>, ..data is a symlink to it,
// swapped with one rename, and each key is a symlink through ..data. A reader never
// sees half an update.
func writeAtomic(dir string, data map[string][]byte, mode os.FileMode) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	stamp := fmt.Sprintf("..%d", time.Now().UnixNano())
	tsDir := filepath.Join(dir, stamp)
	if err := os.Mkdir(tsDir, 0o700); err != nil {
		return err
	}
	keys := make([]string, 0, len(data))
	for k, v := range data {
		if err := os.WriteFile(filepath.Join(tsDir, k), v, mode); err != nil {
			return err
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(stamp, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, k := range keys {
		want[k] = true
		link := filepath.Join(dir, k)
		if target, err := os.Readlink(link); err != nil || target != filepath.Join("..data", k) {
			_ = os.Remove(link)
			if err := os.Symlink(filepath.Join("..data", k), link); err != nil {
				return err
			}
		}
	}
	for _, e := range entries {
		if name := e.Name(); !strings.HasPrefix(name, "..") && !want[name] {
			_ = os.Remove(filepath.Join(dir, name))
		}
	}
	if old != "" && old != stamp {
		_ = os.RemoveAll(filepath.Join(dir, old))
	}
	return nil
}
