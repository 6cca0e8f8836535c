package dataplanecmd

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/metrics"
	"github.com/hookkeeper/hookkeeper/internal/receipt"
	"github.com/hookkeeper/hookkeeper/internal/receiver"
	"github.com/hookkeeper/hookkeeper/internal/retention"
	"github.com/hookkeeper/hookkeeper/internal/version"
)

type receiverFlags struct {
	endpointFile      string
	listenAddress     string
	adminAddress      string
	dispatcher        bool
	logLevel          string
	drainDelay        time.Duration
	shutdownTimeout   time.Duration
	cpuProfile        string
	executionTrace    string
	retentionInterval time.Duration
	// terminationPath is where a failed run writes why (addTerminationFlag).
	terminationPath string
	// Group commit (receipt.GroupCommit); zero means the default.
	groupMaxEvents    int
	groupTransactions int
	groupOverflow     time.Duration
	groupPredict      bool
	// maxInFlight overrides spec.receiver.maxInFlight when positive.
	maxInFlight int
	// poolMaxInFlight caps a pool process's requests, all endpoints together.
	poolMaxInFlight int
	// A receiver pool: the endpoints directory, how often it is read, the heartbeat.
	endpointsDir      string
	endpointsPoll     time.Duration
	heartbeatInterval time.Duration
	podName, poolName string
}

// groupCommit is the group-commit configuration the flags ask for.
func (f receiverFlags) groupCommit() (receipt.GroupCommit, error) {
	g := receipt.DefaultGroupCommit
	if f.groupMaxEvents < 0 || f.groupTransactions < 0 {
		return g, fmt.Errorf("--group-commit-max-events and --group-commit-transactions must be at least 1 (0: the default), got %d and %d",
			f.groupMaxEvents, f.groupTransactions)
	}
	if f.groupMaxEvents > 0 {
		g.MaxEvents = f.groupMaxEvents
	}
	if f.groupTransactions > 0 {
		g.Transactions = f.groupTransactions
	}
	if f.groupOverflow < 0 {
		return g, fmt.Errorf("--group-commit-overflow-after must not be negative, got %s", f.groupOverflow)
	}
	g.OverflowAfter = f.groupOverflow
	g.NoPrediction = !f.groupPredict
	return g, nil
}

// Receiver is the receiver subcommand: it serves one WebhookEndpoint.
func Receiver() *cobra.Command {
	var f receiverFlags
	cmd := &cobra.Command{
		Use:   "receiver",
		Short: "Serve one WebhookEndpoint: verify, record and acknowledge webhooks, and dispatch the outbox",
		Long: `receiver serves one WebhookEndpoint. It reads the manifest from --endpoint FILE (YAML
or JSON) or from $` + config.EnvEndpoint + `, and the database URL and signing secrets from
$` + config.EnvDatabaseURL + ` and $` + config.EnvSigningSecretPrefix + `<index>, the variables the operator sets
in receiver pods. Webhooks are served on $` + config.EnvPodIP + `:` + strconv.Itoa(config.WebhookPort) +
			`, /metrics, /healthz and /readyz on port ` + strconv.Itoa(config.AdminPort) + `.

With --endpoints-dir DIR it is a receiver pool instead: it serves every endpoint of DIR
(NAME.json, the manifest, and NAME.env, its KEY=VALUE variables) at /NAME plus the
endpoint's path, picks up added, changed and removed endpoints every --endpoints-poll
without a restart, and lists them on the admin port at GET /endpoints.`,
		Args: cobra.NoArgs,
		RunE: reportingFailure(&f.terminationPath, func(cmd *cobra.Command) error {
			return runReceiver(cmd.Context(), f)
		}),
	}
	fl := cmd.Flags()
	addTerminationFlag(fl, &f.terminationPath)
	fl.StringVar(&f.endpointFile, "endpoint", "", "WebhookEndpoint manifest file (default: $"+config.EnvEndpoint+")")
	fl.StringVar(&f.listenAddress, "listen-address", "", "webhook listen address host:port (default: $"+config.EnvPodIP+":"+strconv.Itoa(config.WebhookPort)+")")
	fl.StringVar(&f.adminAddress, "admin-address", "", "admin listen address host:port (default: $"+config.EnvPodIP+":"+strconv.Itoa(config.AdminPort)+")")
	fl.BoolVar(&f.dispatcher, "dispatcher", true, "run the outbox dispatcher in this process")
	fl.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fl.DurationVar(&f.drainDelay, "drain-delay", 0, "after SIGTERM, keep serving this long with /readyz failing before closing the listener")
	fl.DurationVar(&f.shutdownTimeout, "shutdown-timeout", receiver.DefaultShutdownTimeout, "how long in-flight requests may take to finish after SIGTERM")
	fl.IntVar(&f.groupMaxEvents, "group-commit-max-events", receipt.DefaultGroupCommit.MaxEvents, "most concurrent deliveries that share one receipt transaction; 1 gives every delivery its own, 0 the default")
	fl.IntVar(&f.groupTransactions, "group-commit-transactions", receipt.DefaultGroupCommit.Transactions, "receipt transactions run at once when deliveries are grouped; 0 the default")
	fl.DurationVar(&f.groupOverflow, "group-commit-overflow-after", receipt.DefaultGroupCommit.OverflowAfter,
		"open the receipt transactions beyond the first only for deliveries queued this long behind the running one; 0 opens them at once")
	fl.BoolVar(&f.groupPredict, "group-commit-predict", !receipt.DefaultGroupCommit.NoPrediction,
		"decide a group on the entities as this process last wrote them (or new) and have the database check it: one round trip instead of two while predictions hold")
	fl.IntVar(&f.maxInFlight, "max-in-flight", 0, "webhook requests handled at once before the rest get 503 with Retry-After (0: spec.receiver.maxInFlight)")
	fl.StringVar(&f.cpuProfile, "cpu-profile", "", "write a Go CPU profile of the whole run to this file (for go tool pprof; off by default)")
	fl.StringVar(&f.executionTrace, "execution-trace", "", "write a Go execution trace of the whole run to this file (for go tool trace: where goroutines wait; off by default; about 200–250 KB per thousand webhooks)")
	fl.DurationVar(&f.retentionInterval, "retention-interval", retention.DefaultInterval, "how often to prune what spec.retention says is too old (one replica at a time)")
	fl.IntVar(&f.poolMaxInFlight, "pool-max-in-flight", v1alpha1.DefaultMaxInFlight,
		"with --endpoints-dir: webhook requests the whole process handles at once, all endpoints together, before the rest get 503 with Retry-After")
	fl.StringVar(&f.endpointsDir, "endpoints-dir", "", "serve every endpoint of this directory (a receiver pool): NAME.json and NAME.env per endpoint, served at /NAME; not with --endpoint")
	fl.DurationVar(&f.endpointsPoll, "endpoints-poll", DefaultEndpointsPoll, "with --endpoints-dir: how often the directory is read for added, changed and removed endpoints")
	fl.DurationVar(&f.heartbeatInterval, "heartbeat-interval", DefaultHeartbeatInterval, "with --endpoints-dir: how often each endpoint checks its database and writes its receiver_heartbeats row")
	fl.StringVar(&f.podName, "pod-name", os.Getenv(config.EnvPodName), "with --endpoints-dir: this pod's name in heartbeats (default: $"+config.EnvPodName+", else the host name)")
	fl.StringVar(&f.poolName, "pool", os.Getenv(config.EnvPool), "with --endpoints-dir: the WebhookReceiverPool's name in heartbeats (default: $"+config.EnvPool+")")
	return cmd
}

func runReceiver(parent context.Context, f receiverFlags) error {
	zl, err := newReceiverZap(f.logLevel)
	if err != nil {
		return err
	}
	group, err := f.groupCommit()
	if err != nil {
		return err
	}
	if f.maxInFlight < 0 {
		return fmt.Errorf("--max-in-flight must be at least 1 (0: spec.receiver.maxInFlight), got %d", f.maxInFlight)
	}
	if f.poolMaxInFlight < 1 {
		return fmt.Errorf("--pool-max-in-flight must be at least 1, got %d", f.poolMaxInFlight)
	}
	defer func() { _ = zl.Sync() }()
	log := zapr.NewLogger(zl)

	stopDiagnostics, err := startDiagnostics(f.cpuProfile, f.executionTrace)
	if err != nil {
		return err
	}
	defer stopDiagnostics()

	if parent == nil {
		parent = context.Background()
	}
	ctx, stop := signal.NotifyContext(parent, syscall.SIGTERM, os.Interrupt)
	defer stop()

	podIP := os.Getenv(config.EnvPodIP)
	webhookAddr := f.listenAddress
	if webhookAddr == "" {
		webhookAddr = net.JoinHostPort(podIP, strconv.Itoa(config.WebhookPort))
	}
	adminAddr := f.adminAddress
	if adminAddr == "" {
		adminAddr = net.JoinHostPort(podIP, strconv.Itoa(config.AdminPort))
	}
	if f.endpointsDir != "" {
		if f.endpointFile != "" || os.Getenv(config.EnvEndpoint) != "" {
			return fmt.Errorf("--endpoints-dir serves a directory of endpoints: it cannot be combined with --endpoint or $%s", config.EnvEndpoint)
		}
		pod := f.podName
		if pod == "" {
			if pod, err = os.Hostname(); err != nil {
				return fmt.Errorf("--pod-name is empty and the host name unknown: %w", err)
			}
		}
		return ServePool(ctx, PoolOptions{
			Dir:               f.endpointsDir,
			Poll:              f.endpointsPoll,
			Heartbeat:         f.heartbeatInterval,
			Pod:               pod,
			Pool:              f.poolName,
			Dispatcher:        f.dispatcher,
			GroupCommit:       group,
			MaxInFlight:       f.maxInFlight,
			PoolMaxInFlight:   f.poolMaxInFlight,
			RetentionInterval: f.retentionInterval,
			WebhookAddr:       webhookAddr,
			AdminAddr:         adminAddr,
			DrainDelay:        f.drainDelay,
			ShutdownTimeout:   f.shutdownTimeout,
			Log:               log,
		})
	}
	ep, err := config.Load(f.endpointFile, os.Getenv)
	if err != nil {
		return fmt.Errorf("load endpoint: %w", err)
	}
	return Serve(ctx, ServeOptions{
		Endpoint:          ep,
		Getenv:            os.Getenv,
		Dispatcher:        f.dispatcher,
		GroupCommit:       group,
		WebhookAddr:       webhookAddr,
		AdminAddr:         adminAddr,
		MaxInFlight:       f.maxInFlight,
		DrainDelay:        f.drainDelay,
		ShutdownTimeout:   f.shutdownTimeout,
		RetentionInterval: f.retentionInterval,
		Log:               log,
	})
}

// ServeOptions is one receiver's wiring: what `hookkeeper receiver` builds from its flags
// and environment, and what `hookkeeper dev --cluster=false` builds in process.
type ServeOptions struct {
	Endpoint *config.Endpoint
	// Getenv reads the rest of the receiver's environment (the refetch API key).
	Getenv func(string) string
	// Dispatcher runs the outbox dispatcher in the same process.
	Dispatcher bool
	// GroupCommit is how concurrent deliveries share receipt transactions; the zero
	// value is receipt.DefaultGroupCommit, MaxEvents 1 turns it off.
	GroupCommit receipt.GroupCommit
	// WebhookAddr and AdminAddr are the listen addresses (host:port).
	WebhookAddr, AdminAddr string
	// MaxInFlight overrides spec.receiver.maxInFlight when positive.
	MaxInFlight     int
	DrainDelay      time.Duration
	ShutdownTimeout time.Duration
	// RetentionInterval is how often the receiver prunes (retention.DefaultInterval
	// when zero).
	RetentionInterval time.Duration
	Log               logr.Logger
}

// Serve opens the endpoint's database pool and serves webhooks (and the admin port, the
// parking sweep, the notifier and, when asked, the dispatcher) until ctx ends, then
// drains. The pool is closed last, after everything that uses it has stopped.
func Serve(ctx context.Context, o ServeOptions) error {
	ep, log := o.Endpoint, o.Log.WithValues("endpoint", o.Endpoint.Key())
	u, err := newEndpointUnit(ctx, unitOptions{
		Endpoint:          ep,
		Getenv:            o.Getenv,
		Dispatcher:        o.Dispatcher,
		GroupCommit:       o.GroupCommit,
		MaxInFlight:       o.MaxInFlight,
		RetentionInterval: o.RetentionInterval,
		Log:               log,
	})
	if err != nil {
		return err
	}
	defer u.db.Close()

	srv, err := receiver.NewServer(receiver.ServerOptions{
		WebhookAddr:       o.WebhookAddr,
		AdminAddr:         o.AdminAddr,
		Webhook:           u.handler,
		Endpoint:          ep.Key(),
		PerEndpointLimits: true,
		DB:                u.db,
		// Ready only once the migration has brought the schema to this binary's version.
		Schema:          u.checkSchema,
		Gatherer:        newGatherer(),
		Tasks:           u.tasks,
		DrainDelay:      o.DrainDelay,
		ShutdownTimeout: o.ShutdownTimeout,
		Logger:          log,
	})
	if err != nil {
		return err
	}
	log.Info("starting receiver", "version", version.Get().String(), "provider", ep.Spec.Provider.Type, "path", ep.Spec.Receiver.Path,
		"dispatcher", o.Dispatcher, "maxConnections", ep.Spec.Database.MaxConnections, "maxInFlight", u.maxInFlight, "gomaxprocs", runtime.GOMAXPROCS(0))
	return srv.Run(ctx)
}

// newGatherer is the registry /metrics serves: hookkeeper's metrics and the Go and
// process collectors.
func newGatherer() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	metrics.Register(reg)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// newReceiverZap is a JSON logger at the given level; structured fields only, so log
// pipelines can index event ids and outcomes.
func newReceiverZap(level string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	cfg := zap.NewProductionConfig()
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.Sampling = nil
	cfg.EncoderConfig.TimeKey = "ts"
	cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	zl, err := cfg.Build()
	if err != nil {
		return nil, fmt.Errorf("build logger: %w", err)
	}
	return zl, nil
}

// startDiagnostics writes a CPU profile to cpuProfile and an execution trace to
// executionTrace (each when named) until the returned function runs. Files, not HTTP
// endpoints, so diagnosing opens no port.
func startDiagnostics(cpuProfile, executionTrace string) (func(), error) {
	var stops []func()
	stop := func() {
		for _, s := range slices.Backward(stops) {
			s()
		}
	}
	start := func(flag, path string, begin func(io.Writer) error, end func()) error {
		out, err := os.Create(path) //nolint:gosec // the operator's own flag names the file
		if err != nil {
			return fmt.Errorf("%s: %w", flag, err)
		}
		if err := begin(out); err != nil {
			_ = out.Close()
			return fmt.Errorf("%s: %w", flag, err)
		}
		stops = append(stops, func() { end(); _ = out.Close() })
		return nil
	}
	if cpuProfile != "" {
		if err := start("--cpu-profile", cpuProfile, pprof.StartCPUProfile, pprof.StopCPUProfile); err != nil {
			return nil, err
		}
	}
	if executionTrace != "" {
		if err := start("--execution-trace", executionTrace, trace.Start, trace.Stop); err != nil {
			stop()
			return nil, err
		}
	}
	return stop, nil
}

// parkingInterval is how often a receiver expires parked events past parkFor and
// refreshes the parked-events gauges. Every replica does it: expiry takes each entity's
// lock, so replicas never expire an event twice.
const parkingInterval = 30 * time.Second

// retentionReporter publishes what a pruning run removed.
func retentionReporter(endpoint string, log logr.Logger) func(retention.Report, error) {
	return func(rep retention.Report, err error) {
		if err != nil {
			log.Error(err, "pruning failed; the next run tries again")
		}
		for kind, n := range map[string]int64{"payloads": rep.Payloads, "receipts": rep.Receipts, "deliveries": rep.Deliveries} {
			metrics.RetentionRemoved.WithLabelValues(endpoint, kind).Add(float64(n))
		}
		if rep.Removed() > 0 {
			log.Info("pruned", "payloads", rep.Payloads, "receipts", rep.Receipts, "deliveries", rep.Deliveries,
				"batches", rep.Batches, "took", rep.Took.Round(time.Millisecond).String())
		}
	}
}

// parkingReporter publishes what RunParking saw.
func parkingReporter(endpoint string, log logr.Logger) func(receipt.ParkingReport, error) {
	return func(rep receipt.ParkingReport, err error) {
		if err != nil {
			log.Error(err, "expiring parked events failed; retrying", "interval", parkingInterval)
			return
		}
		metrics.ParkedEvents.WithLabelValues(endpoint).Set(float64(rep.Parked))
		metrics.ParkedOldestAge.WithLabelValues(endpoint).Set(rep.OldestAge.Seconds())
		if rep.Expired > 0 {
			metrics.ParkedExpired.WithLabelValues(endpoint).Add(float64(rep.Expired))
			log.Info("parked events expired: they waited longer than stateMachine.parkFor for their entity; 'hookkeeper replay --receipts --outcome expired' re-drives them",
				"expired", rep.Expired)
		}
	}
}
