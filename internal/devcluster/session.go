package devcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"
	"k8s.io/client-go/rest"

	"github.com/hookkeeper/hookkeeper/internal/demo"
	"github.com/hookkeeper/hookkeeper/internal/pgtemp"
)

// SessionOptions configures a Session: the whole local environment of `hookkeeper dev`
// and of the end-to-end tests.
type SessionOptions struct {
	// BinDir holds the control-plane binaries (see ClusterOptions.BinDir).
	BinDir string
	// StateDir holds the kubeconfig, logs and Pod logs. Empty means a temporary
	// directory removed by Stop.
	StateDir string
	// RepoRoot holds config/crd/bases and config/samples. Defaults to RepoRoot().
	RepoRoot string
	// Executable runs every Pod (the hookkeeper binary).
	Executable string
	// DatabaseURL is the PostgreSQL the receivers use; empty starts a throwaway server
	// from the binaries on the machine.
	DatabaseURL string
	// StartOperator runs the operator against cfg until ctx is done. cfg impersonates
	// the operator's ServiceAccount (OperatorConfig), whose RBAC is the installer's,
	// applied from RepoRoot/config/rbac first (InstallOperatorRBAC). Nil runs no
	// operator (then no samples are applied).
	StartOperator func(ctx context.Context, cfg *rest.Config) error
	// ApplySamples applies the Stripe orders sample into SampleNamespace.
	ApplySamples bool
	// Out receives progress lines. Defaults to io.Discard.
	Out io.Writer
	// Log receives structured logs of the node agent and proxy.
	Log logr.Logger
	// ReadyTimeout bounds the wait for the sample's receivers. Defaults to 3 minutes.
	ReadyTimeout time.Duration
}

// Session is a running local environment.
type Session struct {
	opts SessionOptions

	Cluster *Cluster
	Agent   *NodeAgent
	Proxy   *ServiceProxy
	Sink    *demo.Sink
	// DatabaseURL is the server's URL (given or throwaway).
	DatabaseURL string
	// Samples is set once the samples are applied.
	Samples *Samples

	pg     *pgtemp.Server
	runCtx context.Context
	cancel context.CancelFunc
	// operator stops the in-process operator and closes operatorDone once it has.
	operatorMu   sync.Mutex
	operator     context.CancelFunc
	operatorDone chan struct{}
	wg           sync.WaitGroup
	errMu        sync.Mutex
	errs         []error
	failed       chan struct{}
	failOnce     sync.Once
	ownsDir      bool
}

// StartSession starts the cluster, the node agent, the Service proxy, PostgreSQL, the
// delivery sink and the operator, and applies the samples. It returns when the sample's
// receivers are ready (or at once after the operator starts when no samples are
// applied). Stop undoes everything.
func StartSession(ctx context.Context, opts SessionOptions) (_ *Session, err error) {
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 3 * time.Minute
	}
	if opts.RepoRoot == "" {
		if opts.RepoRoot, err = RepoRoot(); err != nil {
			return nil, err
		}
	}
	s := &Session{opts: opts, failed: make(chan struct{})}
	if s.opts.StateDir == "" {
		if s.opts.StateDir, err = os.MkdirTemp("", "hookkeeper-dev-"); err != nil {
			return nil, fmt.Errorf("create state directory: %w", err)
		}
		s.ownsDir = true
	}
	if err := os.MkdirAll(s.opts.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("create state directory: %w", err)
	}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	begin := time.Now()

	s.Cluster, err = StartCluster(ctx, ClusterOptions{
		BinDir:   opts.BinDir,
		StateDir: filepath.Join(s.opts.StateDir, "cluster"),
		CRDDirs:  []string{filepath.Join(opts.RepoRoot, "config", "crd", "bases")},
		Out:      opts.Out,
	})
	if err != nil {
		return nil, err
	}
	s.Agent, err = NewNodeAgent(NodeAgentOptions{
		Config:     s.Cluster.Config(),
		Executable: opts.Executable,
		StateDir:   filepath.Join(s.opts.StateDir, "node"),
		Out:        opts.Out,
		Log:        opts.Log.WithName("node"),
	})
	if err != nil {
		return nil, err
	}
	s.Proxy, err = NewServiceProxy(ServiceProxyOptions{Config: s.Cluster.Config(), Log: opts.Log.WithName("proxy")})
	if err != nil {
		return nil, err
	}
	s.goRun(runCtx, "node agent", s.Agent.Run)
	s.goRun(runCtx, "service proxy", s.Proxy.Run)
	if err := s.waitFor(ctx, s.Agent.Ready(), "node agent"); err != nil {
		return nil, err
	}
	if err := s.waitFor(ctx, s.Proxy.Ready(), "service proxy"); err != nil {
		return nil, err
	}

	s.DatabaseURL = opts.DatabaseURL
	if s.DatabaseURL == "" {
		pgBegin := time.Now()
		if s.pg, err = pgtemp.Start(ctx); err != nil {
			return nil, fmt.Errorf("start a throwaway PostgreSQL (or set DATABASE_URL): %w", err)
		}
		s.DatabaseURL = s.pg.URL
		fmt.Fprintf(opts.Out, "postgresql (throwaway) up in %.1fs\n", time.Since(pgBegin).Seconds())
	} else {
		fmt.Fprintln(opts.Out, "postgresql: using DATABASE_URL")
	}
	if s.Sink, err = demo.StartSink(ctx, opts.Log.WithName("sink")); err != nil {
		return nil, err
	}

	if opts.StartOperator != nil {
		// The operator runs as the ServiceAccount the installer creates, authorised by
		// the installer's RBAC; everything else here keeps the admin credentials.
		if err := InstallOperatorRBAC(ctx, s.Cluster.Config(), opts.RepoRoot); err != nil {
			return nil, err
		}
		s.runCtx = runCtx
		s.startOperator()
		fmt.Fprintf(opts.Out, "operator started (in process, as %s)\n", OperatorUser())
	}
	if opts.ApplySamples && opts.StartOperator != nil {
		if s.Samples, err = ApplySamples(ctx, SampleOptions{
			Config:      s.Cluster.Config(),
			RepoRoot:    opts.RepoRoot,
			DatabaseURL: s.DatabaseURL,
			SinkURL:     s.Sink.URL() + "/events",
		}); err != nil {
			return nil, err
		}
		fmt.Fprintf(opts.Out, "applied samples: %s\n", s.Samples.Describe())
		waitCtx, cancelWait := context.WithTimeout(ctx, opts.ReadyTimeout)
		defer cancelWait()
		if err := s.Samples.WaitReceivers(waitCtx, s.Proxy, s.failed); err != nil {
			return nil, s.withFailures(fmt.Errorf("wait for the sample's receivers (pod logs: %s): %w", s.Agent.PodLogDir(), err))
		}
	}
	fmt.Fprintf(opts.Out, "environment up in %.1fs\n", time.Since(begin).Seconds())
	return s, nil
}

// startOperator runs the operator in process, as the installer's ServiceAccount,
// until the session stops or RestartOperator stops it.
func (s *Session) startOperator() {
	cfg := OperatorConfig(s.Cluster.Config())
	ctx, cancel := context.WithCancel(s.runCtx)
	done := make(chan struct{})
	s.operatorMu.Lock()
	s.operator, s.operatorDone = cancel, done
	s.operatorMu.Unlock()
	s.goRun(ctx, "operator", func(ctx context.Context) error {
		defer close(done)
		return s.opts.StartOperator(ctx, cfg)
	})
}

// RestartOperator stops the in-process operator, waits until it has stopped, and
// starts a new one, as a rollout of the operator's Deployment would: what the operator
// kept in memory is gone, what it wrote (status, the databases) stays.
func (s *Session) RestartOperator(ctx context.Context) error {
	s.operatorMu.Lock()
	stop, done := s.operator, s.operatorDone
	s.operatorMu.Unlock()
	if stop == nil {
		return errors.New("the session runs no operator")
	}
	stop()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("wait for the operator to stop: %w", ctx.Err())
	}
	s.startOperator()
	return nil
}

// goRun runs fn until the session stops; an error stops the wait of StartSession and
// is reported by Err.
func (s *Session) goRun(ctx context.Context, name string, fn func(context.Context) error) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := fn(ctx); err != nil && ctx.Err() == nil {
			s.errMu.Lock()
			s.errs = append(s.errs, fmt.Errorf("%s: %w", name, err))
			s.errMu.Unlock()
			s.failOnce.Do(func() { close(s.failed) })
		}
	}()
}

func (s *Session) waitFor(ctx context.Context, ready <-chan struct{}, what string) error {
	select {
	case <-ready:
		return nil
	case <-s.failed:
		return s.withFailures(fmt.Errorf("%s failed to start", what))
	case <-ctx.Done():
		return fmt.Errorf("wait for %s: %w", what, ctx.Err())
	}
}

func (s *Session) withFailures(err error) error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return errors.Join(append([]error{err}, s.errs...)...)
}

// Failed is closed when a background component (node agent, proxy, operator) fails.
func (s *Session) Failed() <-chan struct{} { return s.failed }

// Err returns the failures of background components.
func (s *Session) Err() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return errors.Join(s.errs...)
}

// StateDir is the directory holding the kubeconfig and every log.
func (s *Session) StateDir() string { return s.opts.StateDir }

// DB opens a connection to the session's database.
func (s *Session) DB(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, s.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("connect to the dev database: %w", err)
	}
	return conn, nil
}

// Stop stops the operator, the pods, the proxy, the sink, PostgreSQL (if throwaway) and
// the cluster, and removes the state directory if the session created it.
func (s *Session) Stop() {
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
	if s.Sink != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.Sink.Stop(ctx)
		cancel()
	}
	if s.pg != nil {
		s.pg.Stop()
	}
	if s.Cluster != nil {
		if err := s.Cluster.Stop(); err != nil {
			fmt.Fprintln(s.opts.Out, "stop cluster:", err)
		}
	}
	if s.ownsDir {
		_ = os.RemoveAll(s.opts.StateDir)
	}
}

// ThrowawayDatabase reports whether the session started its own PostgreSQL (removed by
// Stop) rather than using the DatabaseURL it was given.
func (s *Session) ThrowawayDatabase() bool { return s.pg != nil }

// DatabaseHint returns the database URL to show a person and a psql command line that
// connects to it. The throwaway server's URL is shown whole: it has no password (initdb
// --auth=trust, listening on 127.0.0.1 only, removed on exit). A given URL is shown with
// its password redacted, and the psql line reads it from envVar, where it came from.
func (s *Session) DatabaseHint(envVar string) (shown, psql string) {
	return databaseHint(s.DatabaseURL, s.ThrowawayDatabase(), envVar, psqlPath())
}

func databaseHint(raw string, throwaway bool, envVar, psqlBin string) (shown, psql string) {
	if throwaway {
		return raw, fmt.Sprintf("%s %q", psqlBin, raw)
	}
	psql = fmt.Sprintf("%s \"$%s\"", psqlBin, envVar)
	u, err := url.Parse(raw)
	switch {
	case err == nil && u.Scheme != "":
		if q := u.Query(); q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.Redacted(), psql
	case err == nil && !strings.Contains(raw, "password"):
		// A keyword/value connection string without a password.
		return raw, psql
	default:
		// Do not guess where the password of an unparseable string is.
		return "(from $" + envVar + ", not shown: it may hold a password)", psql
	}
}

// psqlPath is psql on PATH, else the one beside the initdb the throwaway server uses.
func psqlPath() string {
	if _, err := exec.LookPath("psql"); err == nil {
		return "psql"
	}
	if dir, err := pgtemp.BinDir(); err == nil {
		p := filepath.Join(dir, "psql")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "psql"
}
