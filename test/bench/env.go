package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/devcluster"
	"github.com/hookkeeper/hookkeeper/internal/loopback"
	"github.com/hookkeeper/hookkeeper/internal/resources"
	"github.com/hookkeeper/hookkeeper/internal/store"
)

// Env is what every suite shares: where PostgreSQL is, which binary to run, how hard
// and how long to push.
type Env struct {
	// AdminURL reaches a PostgreSQL database as a role that may CREATE DATABASE.
	AdminURL string
	// Hookkeeper is the path of the binary run as `<binary> receiver ...`:
	// bin/hookkeeper-receiver, as in receiver pods, or bin/hookkeeper.
	Hookkeeper string
	// Concurrency lists the numbers of requests (or pgbench clients) in flight at once
	// that the receiver suite measures, in order.
	Concurrency []int
	// Phase is the length of one measured phase.
	Phase time.Duration
	// ReceiverArgs are extra flags for `hookkeeper receiver` (e.g. --log-level=error).
	ReceiverArgs []string
	// ReceiverSetupSQL, when set, runs in the receiver suite's database after its
	// migrations and before any load: an experiment on the schema (an index dropped, a
	// setting changed) measured against the same suite without it.
	ReceiverSetupSQL string
	// ReceiverGoMaxProcs is the receiver's GOMAXPROCS (podGoMaxProcs by default); 0
	// leaves Go's default, the machine's cores.
	ReceiverGoMaxProcs int
	// Handwritten is the path of the built hand-written handler (test/bench/handwritten).
	Handwritten string
	// Chart is where the receiver suite writes its SVG chart; empty for none.
	Chart string
	// ImageTool and ImageArchive are the image tool (hack/image) and the linux/amd64
	// OCI archive it built, for the image suite.
	ImageTool, ImageArchive string
	// WorkDir is a temporary directory the suites may write into.
	WorkDir string
	Log     *log.Logger
	// Outputs are files the suites wrote, listed after the table.
	Outputs []string
}

// NewDatabase creates an empty database and returns its URL and a function that drops
// it. Each suite gets its own database, so suites never see each other's rows.
func (e *Env) NewDatabase(ctx context.Context, prefix string) (string, func(), error) {
	name := fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), time.Now().UnixNano()%1_000_000)
	conn, err := pgx.Connect(ctx, e.AdminURL)
	if err != nil {
		return "", nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", nil, fmt.Errorf("create database %s: %w", name, err)
	}
	u, err := url.Parse(e.AdminURL)
	if err != nil {
		return "", nil, fmt.Errorf("parse database URL: %w", err)
	}
	u.Path = "/" + name
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, e.AdminURL)
		if err != nil {
			e.Log.Printf("drop database %s: %v", name, err)
			return
		}
		defer func() { _ = c.Close(ctx) }()
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			e.Log.Printf("drop database %s: %v", name, err)
		}
	}
	return u.String(), drop, nil
}

// NewMigratedDatabase is NewDatabase with hookkeeper's tables migrated into benchSchema,
// as the receiver's migration Job would leave them.
func (e *Env) NewMigratedDatabase(ctx context.Context, prefix string) (string, func(), error) {
	dbURL, drop, err := e.NewDatabase(ctx, prefix)
	if err != nil {
		return "", nil, err
	}
	if _, err := store.Migrate(ctx, dbURL, benchSchema); err != nil {
		drop()
		return "", nil, fmt.Errorf("migrate bench database: %w", err)
	}
	return dbURL, drop, nil
}

// Process is a subprocess started by a suite: hookkeeper, or the hand-written handler.
type Process struct {
	cmd       *exec.Cmd
	AdminAddr string // hookkeeper's admin address; empty for other processes
	exited    chan error
	exitErr   error
}

// StartHookkeeper runs the hookkeeper binary with args and env and waits until
// adminAddr answers /readyz with 200.
func (e *Env) StartHookkeeper(ctx context.Context, adminAddr string, env []string, args ...string) (*Process, error) {
	if e.ReceiverGoMaxProcs > 0 {
		env = append([]string{"GOMAXPROCS=" + strconv.Itoa(e.ReceiverGoMaxProcs)}, env...)
	}
	p, err := e.StartProcess(ctx, e.Hookkeeper, "http://"+adminAddr+"/readyz", env, args...)
	if err != nil {
		return nil, err
	}
	p.AdminAddr = adminAddr
	return p, nil
}

// StartReceiver runs `hookkeeper receiver` with args on free webhook and admin
// addresses (their flags come first) and returns it, ready, with its webhook address.
func (e *Env) StartReceiver(ctx context.Context, env []string, args ...string) (*Process, string, error) {
	webhookAddr, err := loopback.FreeAddr(ctx)
	if err != nil {
		return nil, "", err
	}
	adminAddr, err := loopback.FreeAddr(ctx)
	if err != nil {
		return nil, "", err
	}
	args = append([]string{"receiver", "--listen-address", webhookAddr, "--admin-address", adminAddr}, args...)
	proc, err := e.StartHookkeeper(ctx, adminAddr, env, args...)
	return proc, webhookAddr, err
}

// StartProcess runs binary with args and env (added to this process's environment),
// its output in a log file under WorkDir, and waits until readyURL answers 200.
func (e *Env) StartProcess(ctx context.Context, binary, readyURL string, env []string, args ...string) (*Process, error) {
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	logFile, err := os.CreateTemp(e.WorkDir, filepath.Base(binary)+"-*.log")
	if err != nil {
		return nil, fmt.Errorf("create process log: %w", err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", binary, err)
	}
	p := &Process{cmd: cmd, exited: make(chan error, 1)}
	go func() { p.exited <- cmd.Wait(); _ = logFile.Close() }()

	name := filepath.Base(binary)
	if len(args) > 0 {
		name += " " + args[0]
	}
	deadline := time.Now().Add(30 * time.Second)
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get(readyURL)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		select {
		case err := <-p.exited:
			return nil, fmt.Errorf("%s exited before it was ready (see %s): %w", name, logFile.Name(), err)
		case <-ctx.Done():
			p.Stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, fmt.Errorf("%s not ready after 30s; see %s", name, logFile.Name())
		}
	}
}

// Memory is what /proc/<pid>/status says about the process's resident memory, in
// bytes: the peak (VmHWM) and the current split between anonymous memory (the
// process's own heap and stacks) and file pages (the mapped binary).
type Memory struct {
	Peak, Anon, File int64
}

// Memory reads the process's resident memory figures.
func (p *Process) Memory() (Memory, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return Memory{}, fmt.Errorf("read process status: %w", err)
	}
	var m Memory
	fields := map[string]*int64{"VmHWM:": &m.Peak, "RssAnon:": &m.Anon, "RssFile:": &m.File}
	found := 0
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[2] != "kB" || fields[f[0]] == nil {
			continue
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("parse %s: %w", f[0], err)
		}
		*fields[f[0]] = kb * 1024
		found++
	}
	if found != len(fields) {
		return Memory{}, errors.New("VmHWM, RssAnon or RssFile missing from /proc status")
	}
	return m, nil
}

// CPUTime is the CPU time (user + system) the process has used so far.
func (p *Process) CPUTime() (time.Duration, error) {
	t, err := procCPU(p.cmd.Process.Pid)
	if err != nil {
		return 0, fmt.Errorf("read the CPU time of %s: %w", p.cmd.Path, err)
	}
	return t, nil
}

// Stop sends SIGTERM, waits for a graceful exit and kills the process after 15s.
func (p *Process) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		p.exitErr = err
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		p.exitErr = <-p.exited
	}
}

// podGoMaxProcs is the GOMAXPROCS a receiver pod with the default resources gets: the
// operator's own pod spec, its env resolved the kubelet's way (as the local cluster's
// node agent does). 0 when the pod spec sets none.
func podGoMaxProcs() int {
	pool := &v1alpha1.WebhookReceiverPool{ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: "bench"}}
	pod := resources.PoolReceivers(pool, resources.Options{}).Deployment().Spec.Template.Spec
	c := &pod.Containers[0]
	for _, e := range c.Env {
		if e.Name != "GOMAXPROCS" || e.ValueFrom == nil || e.ValueFrom.ResourceFieldRef == nil {
			continue
		}
		v, err := devcluster.ResourceField(&pod, c, e.ValueFrom.ResourceFieldRef)
		if err != nil {
			panic(fmt.Sprintf("resolve the receiver pod's GOMAXPROCS: %v", err))
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			panic(fmt.Sprintf("the receiver pod's GOMAXPROCS %q: %v", v, err))
		}
		return n
	}
	return 0
}
