package devcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// process is a child started in its own process group, so that stopping it also stops
// anything it spawned.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // valid once done is closed
}

// startProcess starts cmd in a new process group with stdout and stderr appended to
// logPath.
func startProcess(cmd *exec.Cmd, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600) //nolint:gosec // a log path under our state directory
	if err != nil {
		return nil, fmt.Errorf("open log %s: %w", logPath, err)
	}
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// pid returns the process id, which is also the process group id.
func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitCode returns the exit status once the process has exited: the code it passed to
// exit, or 128+signal when a signal ended it, as a container runtime reports it.
func (p *process) exitCode() int {
	<-p.done
	if p.err == nil {
		return 0
	}
	var exitErr *exec.ExitError
	if errors.As(p.err, &exitErr) {
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return exitErr.ExitCode()
	}
	return 128
}

// signalGroup sends sig to the whole process group.
func (p *process) signalGroup(sig syscall.Signal) {
	// ESRCH means the group is already gone, which is what we want.
	_ = syscall.Kill(-p.pid(), sig)
}

// stop sends SIGTERM to the group, waits up to grace, then SIGKILLs the group, and
// waits for the process to be reaped.
func (p *process) stop(grace time.Duration) {
	if p.exited() {
		// The leader is gone; make sure nothing it left in its group lingers.
		p.signalGroup(syscall.SIGKILL)
		return
	}
	p.signalGroup(syscall.SIGTERM)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
	}
	p.signalGroup(syscall.SIGKILL)
	<-p.done
}
