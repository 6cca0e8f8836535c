package convergence

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// hookkeeperBinary is $HOOKKEEPER_BINARY (what `make test` built), else ./cmd/hookkeeper
// built into dir.
func hookkeeperBinary(t *testing.T, root, dir string) string {
	t.Helper()
	if exe := os.Getenv("HOOKKEEPER_BINARY"); exe != "" {
		if !filepath.IsAbs(exe) {
			exe = filepath.Join(root, exe)
		}
		if _, err := os.Stat(exe); err != nil {
			t.Fatalf("HOOKKEEPER_BINARY: %v", err)
		}
		return exe
	}
	exe := filepath.Join(dir, "hookkeeper")
	begin := time.Now()
	build := exec.Command("go", "build", "-o", exe, "./cmd/hookkeeper")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build ./cmd/hookkeeper: %v\n%s", err, out)
	}
	t.Logf("built %s in %.1fs (set HOOKKEEPER_BINARY to skip)", exe, time.Since(begin).Seconds())
	return exe
}

// receiverProc is a `hookkeeper receiver` subprocess, configured as the operator
// configures a pod: a manifest plus environment variables.
type receiverProc struct {
	t                      *testing.T
	exe, manifest, logFile string
	env                    []string
	webhookAddr, adminAddr string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	starts  int
	waitErr error
}

func newReceiverProc(t *testing.T, exe, manifest string, env map[string]string) *receiverProc {
	p := &receiverProc{
		t: t, exe: exe, manifest: manifest,
		logFile:     filepath.Join(t.TempDir(), "receiver.log"),
		webhookAddr: testsupport.FreeAddr(t), adminAddr: testsupport.FreeAddr(t),
	}
	p.env = append(p.env, os.Environ()...)
	p.env = append(p.env, config.EnvEndpoint+"=")
	for k, v := range env {
		p.env = append(p.env, k+"="+v)
	}
	t.Cleanup(p.kill)
	return p
}

func (p *receiverProc) url() string { return "http://" + p.webhookAddr + "/" }

// start runs a new process on the same addresses and waits until /readyz answers 200.
func (p *receiverProc) start(ctx context.Context) error {
	out, err := os.OpenFile(p.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.exe, "receiver", "--endpoint", p.manifest,
		"--listen-address", p.webhookAddr, "--admin-address", p.adminAddr, "--log-level", "warn")
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		return err
	}
	exited := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.starts++
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		_ = out.Close()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		close(exited)
	}()
	err = testsupport.PollReady(ctx, "http://"+p.adminAddr+"/readyz", 60*time.Second, func() error {
		select {
		case <-exited:
			return fmt.Errorf("receiver exited: %w", p.waitErr)
		default:
			return nil
		}
	})
	if err != nil {
		return fmt.Errorf("receiver not ready: %w\n%s", err, p.logTail())
	}
	return nil
}

// kill sends SIGKILL (kill -9) and waits for the process to be gone.
func (p *receiverProc) kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		p.t.Errorf("receiver pid %d did not exit after SIGKILL", cmd.Process.Pid)
	}
}

// logTail is the end of the receivers' log, for failure messages.
func (p *receiverProc) logTail() string {
	data, err := os.ReadFile(p.logFile)
	if err != nil {
		return ""
	}
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return "receiver log (tail):\n" + string(data)
}

// ---- the sink ----

// sinkKey is one Idempotency-Key as the sink saw it.
type sinkKey struct {
	Endpoint, EntityKey, Type string
	Count                     int
}

// sink is an independent effect recorder: every POST is answered 204 after it is
// recorded; per entity it keeps the unique keys in order of first receipt. A repeated
// key is information (the dispatcher may redeliver after a crash between the POST and
// marking the row delivered), not a second effect.
type sink struct {
	srv *httptest.Server

	mu       sync.Mutex
	keys     map[string]*sinkKey
	byEntity map[string][]string // endpoint|entityKey -> keys in order of first receipt
	posts    int
	repeats  int
	problems []string
}

func newSink(t *testing.T) *sink {
	s := &sink{keys: map[string]*sinkKey{}, byEntity: map[string][]string{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *sink) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var env struct {
		ID        string `json:"id"`
		Type      string `json:"type"`
		Endpoint  string `json:"endpoint"`
		EntityKey string `json:"entityKey"`
	}
	key := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	defer s.mu.Unlock()
	s.posts++
	if err := json.Unmarshal(body, &env); err != nil || key == "" || env.Type == "" {
		s.problems = append(s.problems, fmt.Sprintf("unreadable delivery (key %q, %v): %.200s", key, err, body))
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if env.ID != key {
		s.problems = append(s.problems, fmt.Sprintf("delivery id %q differs from its Idempotency-Key %q", env.ID, key))
	}
	if k, seen := s.keys[key]; seen {
		k.Count++
		s.repeats++
		if k.Type != env.Type || k.EntityKey != env.EntityKey || k.Endpoint != env.Endpoint {
			s.problems = append(s.problems, fmt.Sprintf("key %s first carried %s for %s, now %s for %s",
				key, k.Type, k.EntityKey, env.Type, env.EntityKey))
		}
	} else {
		s.keys[key] = &sinkKey{Endpoint: env.Endpoint, EntityKey: env.EntityKey, Type: env.Type, Count: 1}
		ek := env.Endpoint + "|" + env.EntityKey
		s.byEntity[ek] = append(s.byEntity[ek], key)
	}
	w.WriteHeader(http.StatusNoContent)
}

// effects returns an entity's effect types (unique keys, in order of first receipt)
// and how many of its keys arrived more than once.
func (s *sink) effects(endpoint, entityKey string) (types []string, repeated int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, key := range s.byEntity[endpoint+"|"+entityKey] {
		k := s.keys[key]
		types = append(types, k.Type)
		if k.Count > 1 {
			repeated++
		}
	}
	return types, repeated
}

func (s *sink) uniqueKeys(endpoint string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, k := range s.keys {
		if k.Endpoint == endpoint {
			n++
		}
	}
	return n
}

func (s *sink) summary() (posts, unique, repeats int, problems []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.posts, len(s.keys), s.repeats, append([]string(nil), s.problems...)
}

func joinLines(lines []string) string { return strings.Join(lines, "\n") }
