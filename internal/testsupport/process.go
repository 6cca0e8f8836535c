package testsupport

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Process is a child process a test runs (a re-executed test binary, say) whose output
// it keeps for the failure message and whose end it can watch.
type Process struct {
	what   string
	cmd    *exec.Cmd
	out    SyncBuffer
	exited chan struct{}
	grace  time.Duration
	stop   sync.Once
}

// StartProcess starts cmd with its stdout and stderr collected, and stops it (see Stop)
// when the test ends at the latest. what names it in failure messages ("receiver");
// grace is how long Stop waits after SIGTERM before it kills the process.
func StartProcess(tb testing.TB, what string, cmd *exec.Cmd, grace time.Duration) *Process {
	tb.Helper()
	p := &Process{what: what, cmd: cmd, exited: make(chan struct{}), grace: grace}
	cmd.Stdout, cmd.Stderr = &p.out, &p.out
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", what, err)
	}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	tb.Cleanup(p.Stop)
	return p
}

// Pid is the process's id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Output is what the process has written to stdout and stderr so far.
func (p *Process) Output() string { return p.out.String() }

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.exited }

// Exited returns nil while the process runs, and once it has ended an error that says
// so with its output: the exited of WaitReady, and a check for a test that watches the
// process idle.
func (p *Process) Exited() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited:\n%s", p.what, p.Output())
	default:
		return nil
	}
}

// Stop sends the process SIGTERM and returns once it has exited, killing it when it
// has not after the grace period. Only the first call acts; later ones return at once.
func (p *Process) Stop() {
	p.stop.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(p.grace):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
}

// RSS is the resident memory (VmRSS) of process pid in bytes.
func RSS(tb testing.TB, pid int) int64 {
	tb.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatalf("read process status: %v", err)
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				tb.Fatalf("parse VmRSS %q: %v", line, err)
			}
			return kb << 10
		}
	}
	tb.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// SyncBuffer keeps what several goroutines, or a child's two pipes, write, and passes
// each write on to Echo when it is set (a test's log, say), one write at a time.
type SyncBuffer struct {
	Echo io.Writer

	mu sync.Mutex
	b  strings.Builder
}

func (l *SyncBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Echo != nil {
		if _, err := l.Echo.Write(p); err != nil {
			return 0, fmt.Errorf("echo: %w", err)
		}
	}
	return l.b.Write(p)
}

// String is everything written so far.
func (l *SyncBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
