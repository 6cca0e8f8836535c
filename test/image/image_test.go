// Package image runs the OCI image `make image` builds in podman, the way the operator
// runs it in a cluster: the migration Job's container, then a receiver pod's container
// (uid 65532, read-only root, every capability dropped, no new privileges, the env and
// args the operator renders), against PostgreSQL on the host; it sends a signed Stripe
// webhook and checks the 200, the row and the delivery to the sink. It also runs the
// manager's --help.
//
// It needs podman and runc (apt-get install -y --no-install-recommends podman runc). It
// fails when they are missing; HOOKKEEPER_SKIP_IMAGE_TEST=1 skips it, and says so.
// The image is bin/hookkeeper-linux-amd64.oci.tar (HOOKKEEPER_IMAGE_ARCHIVE), which
// `make test` builds; run alone, the test builds it with `make image-test-archive`.
package image

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"

	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/demo"
	"github.com/hookkeeper/hookkeeper/internal/devcluster"
	"github.com/hookkeeper/hookkeeper/internal/resources"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

func TestMain(m *testing.M) { testsupport.Main(m) }

const (
	skipEnv    = "HOOKKEEPER_SKIP_IMAGE_TEST"
	archiveEnv = "HOOKKEEPER_IMAGE_ARCHIVE"
	installFix = "install them with `apt-get install -y --no-install-recommends podman runc` (.ci/run does), " +
		"or set " + skipEnv + "=1 to skip this test"
	secret = "whsec_image_test"
)

func TestImageRunsAsAReceiverPod(t *testing.T) {
	p := newPodman(t)
	imageID := p.load(t, imageArchive(t))

	t.Run("manager --help", func(t *testing.T) {
		out, err := p.run(t, "hk-help", containerSpec{image: imageID, args: []string{"manager", "--help"}, sc: restricted()})
		if err != nil {
			t.Fatalf("manager --help in the image: %v\n%s", err, out)
		}
		if !strings.Contains(out, "manager") || !strings.Contains(out, "--leader-elect") {
			t.Errorf("manager --help printed no usage:\n%s", out)
		}
	})

	// The sink the dispatcher delivers to: a server on the host (the container shares
	// the host's network, as a pod reaches a Service).
	delivered := make(chan string, 4)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		delivered <- string(body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer sink.Close()

	// The objects the operator would create for this endpoint, from its own builders.
	ep := testsupport.StripeEndpoint(sink.URL + "/orders")
	rendered, err := resources.Render(ep, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	opts := resources.Options{Image: imageID, Rendered: rendered, ConfigHash: "image-test"}
	dbURL := testsupport.NewDatabase(t)
	secrets := map[string]map[string]string{
		"shop-db":        {"uri": dbURL},
		"stripe-webhook": {"current": secret},
	}
	// Each pod gets its own loopback address as its IP, so the receiver's fixed ports
	// (8080, 9090) do not meet another process's on this machine.
	podIP := randomLoopback(t)

	job := resources.MigrationJob(ep, opts, "image-test", "image-test")
	migrate := job.Spec.Template.Spec
	out, err := p.run(t, "hk-migrate", fromPod(t, migrate, migrate.Containers[0], secrets, podIP))
	if err != nil {
		t.Fatalf("migrate in the image: %v\n%s", err, out)
	}
	t.Logf("migrate: %s", strings.TrimSpace(out))

	deploy := resources.Deployment(ep, opts)
	pod := deploy.Spec.Template.Spec
	spec := fromPod(t, pod, pod.Containers[0], secrets, podIP)
	name := p.start(t, "hk-receiver", spec)

	admin := "http://" + net.JoinHostPort(podIP, strconv.Itoa(config.AdminPort))
	testsupport.WaitReady(t, admin+"/readyz", time.Minute, func() error {
		if state, _ := p.cmd(t, "inspect", "--format", "{{.State.Status}}", name); strings.TrimSpace(state) == "exited" {
			return errors.New("the receiver container exited\n" + p.logs(name))
		}
		return nil
	})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	body := demo.StripeEvent("evt_image_1", "payment_intent.succeeded", "ord-image-1", 4200, time.Now())
	url := "http://" + net.JoinHostPort(podIP, strconv.Itoa(config.WebhookPort)) + "/stripe"
	status, err := demo.PostStripe(ctx, url, secret, body)
	if err != nil {
		t.Fatalf("post webhook: %v\n%s", err, p.logs(name))
	}
	if status != http.StatusOK {
		t.Fatalf("webhook: %d, want 200\n%s", status, p.logs(name))
	}
	// The pod's CPU request (100m, the default) reaches Go as GOMAXPROCS, rounded up.
	if logs := p.logs(name); !strings.Contains(logs, `"gomaxprocs":1`) {
		t.Errorf("the receiver did not start with GOMAXPROCS=1 (GOMAXPROCS env %q):\n%s", spec.env["GOMAXPROCS"], logs)
	}
	// A wrong signature is refused by the same container.
	if status, err := demo.PostStripe(ctx, url, "whsec_wrong", body); err != nil || status != http.StatusUnauthorized && status != http.StatusBadRequest {
		t.Errorf("webhook with a wrong secret: %d, %v; want 400 or 401", status, err)
	}

	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	var outcome, entity string
	err = conn.QueryRow(ctx, `SELECT outcome, entity_key FROM `+testsupport.StripeEndpointSchema+`.webhook_events WHERE endpoint = 'shop/payments' AND event_id = 'evt_image_1'`).Scan(&outcome, &entity)
	if err != nil {
		t.Fatalf("the receipt row: %v", err)
	}
	if outcome != "applied" || entity != "ord-image-1" {
		t.Errorf("receipt: outcome %q for %q, want applied for ord-image-1", outcome, entity)
	}
	select {
	case d := <-delivered:
		if !strings.Contains(d, "order.paid") || !strings.Contains(d, "ord-image-1") {
			t.Errorf("delivery %s, want order.paid for ord-image-1", d)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the dispatcher in the container delivered nothing to the sink\n%s", p.logs(name))
	}

	// SIGTERM, as the kubelet sends it: the receiver drains and exits 0.
	stopped := time.Now()
	if out, err := p.cmd(t, "stop", "--time", "40", name); err != nil {
		t.Fatalf("podman stop: %v\n%s", err, out)
	}
	code, _ := p.cmd(t, "inspect", "--format", "{{.State.ExitCode}}", name)
	if strings.TrimSpace(code) != "0" {
		t.Errorf("the receiver exited %s after SIGTERM, want 0\n%s", strings.TrimSpace(code), p.logs(name))
	}
	t.Logf("receiver stopped %.1fs after SIGTERM (drain delay %s)", time.Since(stopped).Seconds(), resources.ReceiverDrainDelay)
}

// containerSpec is what `podman run` needs of one Kubernetes container.
type containerSpec struct {
	image string
	// command replaces the image's entrypoint when set (Kubernetes' command).
	command []string
	args    []string
	env     map[string]string
	tmpfs   []string
	sc      *corev1.SecurityContext
	podSec  *corev1.PodSecurityContext
}

func restricted() *corev1.SecurityContext {
	uid := int64(65532)
	f := false
	return &corev1.SecurityContext{
		RunAsUser: &uid, RunAsGroup: &uid, ReadOnlyRootFilesystem: new(true),
		AllowPrivilegeEscalation: &f, Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

// fromPod translates a container of the operator's pod spec: its args, its env with
// Secret keys, the pod IP and resource fields (GOMAXPROCS) resolved as the kubelet
// would, emptyDir mounts as tmpfs.
func fromPod(t *testing.T, pod corev1.PodSpec, c corev1.Container, secrets map[string]map[string]string, podIP string) containerSpec {
	t.Helper()
	// Receiver and migration pods run the data-plane binary of the image, not its
	// entrypoint (/hookkeeper, the operator's): the command replaces the entrypoint, as
	// in Kubernetes, so a binary missing from the image fails here.
	if want := []string{"/hookkeeper-receiver"}; !slices.Equal(c.Command, want) {
		t.Fatalf("container %s has command %v, want %v (the data-plane binary of the image)", c.Name, c.Command, want)
	}
	s := containerSpec{image: c.Image, command: c.Command, args: c.Args, env: map[string]string{}, sc: c.SecurityContext, podSec: pod.SecurityContext}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			s.env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			v, ok := secrets[ref.Name][ref.Key]
			if !ok {
				t.Fatalf("container %s reads Secret %s key %s, which the test does not have", c.Name, ref.Name, ref.Key)
			}
			s.env[e.Name] = v
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP":
			s.env[e.Name] = podIP
		case e.ValueFrom.ResourceFieldRef != nil:
			v, err := devcluster.ResourceField(&pod, &c, e.ValueFrom.ResourceFieldRef)
			if err != nil {
				t.Fatalf("container %s: env %s: %v", c.Name, e.Name, err)
			}
			s.env[e.Name] = v
		default:
			t.Fatalf("container %s: env %s has a source the test cannot resolve", c.Name, e.Name)
		}
	}
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name != m.Name {
				continue
			}
			if v.EmptyDir == nil {
				t.Fatalf("container %s mounts volume %s, which is not an emptyDir", c.Name, v.Name)
			}
			opt := m.MountPath + ":rw,nosuid,nodev"
			if v.EmptyDir.SizeLimit != nil {
				opt += ",size=" + strconv.FormatInt(v.EmptyDir.SizeLimit.Value(), 10)
			}
			s.tmpfs = append(s.tmpfs, opt)
		}
	}
	return s
}

type podman struct {
	mu    sync.Mutex
	names []string
}

func newPodman(t *testing.T) *podman {
	t.Helper()
	if os.Getenv(skipEnv) == "1" {
		t.Skipf("%s=1: not running the image in podman", skipEnv)
	}
	for _, bin := range []string{"podman", "runc"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is not installed: this test runs the image in podman with runc; %s", bin, installFix)
		}
	}
	p := &podman{}
	t.Cleanup(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, n := range p.names {
			_, _ = exec.Command("podman", "rm", "--force", "--time", "0", n).CombinedOutput()
		}
	})
	return p
}

func (p *podman) cmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "podman", args...).CombinedOutput()
	return string(out), err
}

// load loads the OCI archive unless podman already has its image, and returns the
// image ID (the config digest).
func (p *podman) load(t *testing.T, archive string) string {
	t.Helper()
	id := archiveImageID(t, archive)
	if _, err := p.cmd(t, "image", "exists", id); err == nil {
		t.Logf("podman already has image %s from %s", id[:12], archive)
		return id
	}
	start := time.Now()
	out, err := p.cmd(t, "load", "--input", archive)
	if err != nil {
		t.Fatalf("podman load --input %s: %v\n%s", archive, err, out)
	}
	if _, err := p.cmd(t, "image", "exists", id); err != nil {
		t.Fatalf("podman load --input %s did not give image %s:\n%s", archive, id, out)
	}
	t.Logf("loaded %s as image %s in %.1fs", archive, id[:12], time.Since(start).Seconds())
	// Earlier test images lose their tag to this one: remove those, and only those.
	if out, err := p.cmd(t, "images", "--quiet", "--no-trunc", "--filter", "dangling=true",
		"--filter", "label=org.opencontainers.image.title=hookkeeper"); err == nil {
		for old := range strings.FieldsSeq(out) {
			_, _ = p.cmd(t, "rmi", old)
		}
	}
	return id
}

func (p *podman) runArgs(t *testing.T, name string, s containerSpec) ([]string, []string) {
	t.Helper()
	p.mu.Lock()
	p.names = append(p.names, name)
	p.mu.Unlock()
	args := []string{"--runtime", "runc", "run", "--name", name, "--network", "host",
		// The sandbox has no CAP_SYS_RESOURCE: keep the limits at or under the current ones.
		"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", "--pull", "never"}
	sc := s.sc
	if sc == nil {
		t.Fatalf("container %s has no securityContext", name)
	}
	uid, gid := sc.RunAsUser, sc.RunAsGroup
	if uid == nil && s.podSec != nil {
		uid = s.podSec.RunAsUser
	}
	if gid == nil && s.podSec != nil {
		gid = s.podSec.RunAsGroup
	}
	if uid != nil {
		u := strconv.FormatInt(*uid, 10)
		if gid != nil {
			u += ":" + strconv.FormatInt(*gid, 10)
		}
		args = append(args, "--user", u)
	}
	if sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
		// No tmpfs that the pod spec does not ask for: /tmp comes from its emptyDir.
		args = append(args, "--read-only", "--read-only-tmpfs=false")
	}
	if sc.Capabilities != nil {
		for _, c := range sc.Capabilities.Drop {
			args = append(args, "--cap-drop", string(c))
		}
		for _, c := range sc.Capabilities.Add {
			args = append(args, "--cap-add", string(c))
		}
	}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		args = append(args, "--security-opt", "no-new-privileges")
	}
	for _, m := range s.tmpfs {
		args = append(args, "--tmpfs", m)
	}
	if len(s.command) > 0 {
		// The JSON form keeps each element one argument, as the pod spec's list.
		ep, err := json.Marshal(s.command)
		if err != nil {
			t.Fatal(err)
		}
		args = append(args, "--entrypoint", string(ep))
	}
	// Values stay out of the command line: `--env NAME` takes each from podman's own
	// environment, as secrets never appear in a pod spec.
	env := os.Environ()
	for k, v := range s.env {
		args = append(args, "--env", k)
		env = append(env, k+"="+v)
	}
	return args, env
}

// run runs a container to completion and returns its output.
func (p *podman) run(t *testing.T, prefix string, s containerSpec) (string, error) {
	t.Helper()
	_, out, err := p.podmanRun(t, prefix, "--rm", s)
	return out, err
}

// start starts a container in the background and returns its name.
func (p *podman) start(t *testing.T, prefix string, s containerSpec) string {
	t.Helper()
	name, out, err := p.podmanRun(t, prefix, "--detach", s)
	if err != nil {
		t.Fatalf("podman run %s: %v\n%s", name, err, out)
	}
	return name
}

// podmanRun is `podman run mode` of s in a container named prefix-<random>.
func (p *podman) podmanRun(t *testing.T, prefix, mode string, s containerSpec) (name, out string, err error) {
	t.Helper()
	name = prefix + "-" + testsupport.RandomHex(4)
	args, env := p.runArgs(t, name, s)
	args = append(args, mode, s.image)
	args = append(args, s.args...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "podman", args...)
	cmd.Env = env
	b, err := cmd.CombinedOutput()
	return name, string(b), err
}

func (p *podman) logs(name string) string {
	out, _ := exec.Command("podman", "logs", name).CombinedOutput()
	return "container log:\n" + string(out)
}

// imageArchive is the linux/amd64 OCI archive to load: $HOOKKEEPER_IMAGE_ARCHIVE, else
// the one `make image-test-archive` builds (and keeps while its inputs are unchanged).
func imageArchive(t *testing.T) string {
	t.Helper()
	if a := os.Getenv(archiveEnv); a != "" {
		if _, err := os.Stat(a); err != nil {
			t.Fatalf("%s: %v", archiveEnv, err)
		}
		return a
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, err := exec.Command("make", "-C", root, "--no-print-directory", "image-test-archive").CombinedOutput()
	if err != nil {
		t.Fatalf("make image-test-archive: %v\n%s", err, out)
	}
	t.Logf("make image-test-archive (%.1fs):\n%s", time.Since(start).Seconds(), out)
	return filepath.Join(root, "bin", "hookkeeper-linux-amd64.oci.tar")
}

// archiveImageID returns the config digest of the one image in an OCI archive, which
// podman uses as the image ID. It asks the image tool (`hookkeeper-image sizes`, built by
// make image-test-archive), as the bench does for the image's size.
func archiveImageID(t *testing.T, archive string) string {
	t.Helper()
	tool := filepath.Join(testsupport.RepoRoot(t), "bin", "hookkeeper-image")
	out, err := exec.Command(tool, "sizes", "-archive", archive, "-json").Output() //nolint:gosec // the repository's own tool
	if err != nil {
		t.Fatalf("%s sizes -archive %s: %v (make image-test-archive builds the tool)", tool, archive, err)
	}
	var images []struct {
		Config string `json:"configDigest"`
	}
	if err := json.Unmarshal(out, &images); err != nil || len(images) != 1 || images[0].Config == "" {
		t.Fatalf("%s: want one image with its config digest, got %v (%s); a single-platform archive "+
			"is expected, and a tool from make image-test-archive", archive, err, out)
	}
	return strings.TrimPrefix(images[0].Config, "sha256:")
}

// randomLoopback is an address in 127.0.0.0/8 that nothing listens on at the
// receiver's ports.
func randomLoopback(t *testing.T) string {
	t.Helper()
	for range 20 {
		b := make([]byte, 2)
		_, _ = rand.Read(b)
		ip := fmt.Sprintf("127.%d.%d.%d", 100+b[0]%100, b[1], 2+b[0]%200)
		free := true
		for _, port := range []int{config.WebhookPort, config.AdminPort} {
			l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
			if err != nil {
				free = false
				break
			}
			_ = l.Close()
		}
		if free {
			return ip
		}
	}
	t.Fatal("no free loopback address for the receiver's ports")
	return ""
}
