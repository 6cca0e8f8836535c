package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/hookkeeper/hookkeeper/controllers"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/demo"
	"github.com/hookkeeper/hookkeeper/internal/devcluster"
)

// devReceiverImage is what the operator writes into receiver pods in the dev
// environment; the dev node runs this binary whatever the image says.
const devReceiverImage = "hookkeeper:dev"

func init() { rootCmd.AddCommand(newDevCmd()) }

type devFlags struct {
	binDir   string
	stateDir string
	demo     bool
	cluster  bool
}

func newDevCmd() *cobra.Command {
	var f devFlags
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local cluster with the operator and the samples, no Docker needed",
		Long: "dev starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler from --bin-dir,\n" +
			"a node agent that runs each Pod as a process of this binary on its own 127.0.0.N address,\n" +
			"a proxy that makes every Service reachable on 127.0.0.1, PostgreSQL ($" + config.EnvDatabaseURL + ", or a\n" +
			"throwaway server from the local binaries) and the operator, then applies the Stripe orders\n" +
			"sample and serves until interrupted. --demo then sends scripted signed webhooks.\n\n" +
			"--cluster=false needs no control plane: it runs the Stripe orders sample's receiver in this\n" +
			"process on PostgreSQL, sends the same scripted webhooks, prints the table and exits.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDev(cmd.Context(), f) },
	}
	cmd.Flags().StringVar(&f.binDir, "bin-dir", "", "directory of the control-plane binaries (default: $"+devcluster.EnvBinDir+", else <repo>/bin)")
	cmd.Flags().StringVar(&f.stateDir, "state-dir", "", "directory for the kubeconfig, logs and pod logs (default: a temporary directory removed on exit)")
	cmd.Flags().BoolVar(&f.demo, "demo", false, "send scripted signed Stripe webhooks once ready and print what happened")
	cmd.Flags().BoolVar(&f.cluster, "cluster", true, "start the local cluster; false: the demo against an in-process receiver, then exit")
	return cmd
}

func runDev(parent context.Context, f devFlags) error {
	if parent == nil {
		parent = context.Background()
	}
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if !f.cluster {
		return runLocalDemo(ctx)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this executable: %w", err)
	}
	if f.binDir == "" {
		if f.binDir, err = devcluster.DefaultBinDir(); err != nil {
			return err
		}
	}
	stateDir := f.stateDir
	if stateDir == "" {
		if stateDir, err = os.MkdirTemp("", "hookkeeper-dev-"); err != nil {
			return fmt.Errorf("create state directory: %w", err)
		}
		defer func() { _ = os.RemoveAll(stateDir) }()
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}
	logFile, err := os.OpenFile(filepath.Join(stateDir, "hookkeeper-dev.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600) //nolint:gosec // our state directory
	if err != nil {
		return fmt.Errorf("open log: %w", err)
	}
	defer func() { _ = logFile.Close() }()
	// The terminal shows progress; the operator's and the agent's logs go to a file.
	log := zap.New(zap.WriteTo(logFile), zap.Level(zapcore.InfoLevel))
	ctrl.SetLogger(log)

	out := os.Stdout
	fmt.Fprintf(out, "state and logs in %s\n", stateDir)
	session, err := devcluster.StartSession(ctx, devcluster.SessionOptions{
		BinDir:      f.binDir,
		StateDir:    stateDir,
		Executable:  self,
		DatabaseURL: os.Getenv(config.EnvDatabaseURL),
		StartOperator: func(ctx context.Context, cfg *rest.Config) error {
			return controllers.RunInProcess(ctx, cfg, controllers.Options{ReceiverImage: devReceiverImage})
		},
		ApplySamples: true,
		Out:          out,
		Log:          log,
	})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(out, "stopping...")
		session.Stop()
	}()

	fmt.Fprintf(out, "\nkubeconfig: %s\n  kubectl --kubeconfig %s get pods -A\n", session.Cluster.KubeconfigPath(), session.Cluster.KubeconfigPath())
	fmt.Fprintf(out, "pod logs:   %s\n", session.Agent.PodLogDir())
	dbShown, psql := session.DatabaseHint(config.EnvDatabaseURL)
	dbKind := "throwaway, no password, removed on exit"
	if !session.ThrowawayDatabase() {
		dbKind = "$" + config.EnvDatabaseURL
	}
	fmt.Fprintf(out, "database:   %s (%s)\n  %s\n", dbShown, dbKind, psql)
	fmt.Fprintf(out, "sink:       %s/events (records deliveries, one log line each)\n  curl -s %s/events   # the last %d deliveries, newest last\n",
		session.Sink.URL(), session.Sink.URL(), demo.SinkListLimit)
	for _, ep := range session.Samples.Endpoints {
		u, err := session.Samples.ReceiverURL(session.Proxy, ep)
		if err != nil {
			return err
		}
		fmt.Fprintln(out, devcluster.ReceiverLine(ep.Namespace, ep.Name, u))
	}
	fmt.Fprintln(out, "ready")

	// Endpoints applied from now on (kubectl apply -f ...) print their address when
	// Ready, and a line when deleted. Stopped before the session is.
	watchCtx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		if err := session.WatchEndpoints(watchCtx, out, session.Samples.Endpoints); err != nil && watchCtx.Err() == nil {
			fmt.Fprintln(out, "watch WebhookEndpoints:", err)
		}
	}()
	defer func() {
		stopWatch()
		<-watchDone
	}()

	if f.demo {
		if err := devcluster.RunDemo(ctx, session, out); err != nil {
			return err
		}
	}
	select {
	case <-ctx.Done():
		return nil
	case <-session.Failed():
		return session.Err()
	}
}

// runLocalDemo is `hookkeeper dev --cluster=false`: the demo without a control plane. The
// receiver logs only warnings and errors, to stderr; the table goes to stdout.
func runLocalDemo(ctx context.Context) error {
	root, err := devcluster.RepoRoot()
	if err != nil {
		return err
	}
	log := zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.WarnLevel))
	return demo.RunLocal(ctx, demo.LocalOptions{
		RepoRoot:    root,
		DatabaseURL: os.Getenv(config.EnvDatabaseURL),
		Out:         os.Stdout,
		Log:         log,
	})
}
