package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/outbox"
	"github.com/hookkeeper/hookkeeper/internal/receipt"
	"github.com/hookkeeper/hookkeeper/internal/replay"
)

func init() { rootCmd.AddCommand(newReplayCmd()) }

// endpointFlags say which endpoint a command works on and how to reach its database;
// replay, discard and erase share them.
type endpointFlags struct {
	endpointFile string
	kube         kubeFlags
	databaseURL  string
}

// selectionFlags narrow the rows a command works on, and --dry-run.
type selectionFlags struct {
	since, until string
	ids          []int64
	dryRun       bool
	batchSize    int
}

type replayFlags struct {
	endpointFlags
	selectionFlags
	deadLetters bool
	receipts    bool
	outcomes    []string
}

// addEndpointFlags registers endpointFlags on fl.
func addEndpointFlags(fl *pflag.FlagSet, f *endpointFlags) {
	fl.StringVar(&f.endpointFile, "endpoint", "", "WebhookEndpoint manifest file, instead of NAME (default: $"+config.EnvEndpoint+")")
	fl.StringVarP(&f.kube.namespace, "namespace", "n", "", "with NAME: the endpoint's namespace (default: the kubeconfig context's)")
	fl.StringVar(&f.kube.kubeconfig, "kubeconfig", "", "with NAME: the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")
	fl.StringVar(&f.kube.context, "context", "", "with NAME: the kubeconfig context (default: the current one)")
	fl.StringVar(&f.databaseURL, "database-url", "", "PostgreSQL URL, instead of the endpoint's Secret (with NAME) or $"+config.EnvDatabaseURL+"; with kubectl port-forward, how to reach an in-cluster database")
}

// addSelectionFlags registers selectionFlags on fl; at names the time rows are selected
// by and idKinds the rows --id takes.
func addSelectionFlags(fl *pflag.FlagSet, f *selectionFlags, at, idKinds, verb string) {
	fl.StringVar(&f.since, "since", "", "only rows "+at+" at or after this time")
	fl.StringVar(&f.until, "until", "", "only rows "+at+" before this time")
	fl.Int64SliceVar(&f.ids, "id", nil, "only these row ids ("+idKinds+"); repeatable")
	fl.BoolVar(&f.dryRun, "dry-run", false, "list what would be "+verb+" and change nothing")
	fl.IntVar(&f.batchSize, "batch-size", outbox.DefaultReplayBatch, "rows per step (progress is printed after each)")
}

func newReplayCmd() *cobra.Command {
	var f replayFlags
	cmd := &cobra.Command{
		Use:   "replay [-n NAMESPACE] NAME (--dead-letters | --receipts [--outcome O,...]) [--since T] [--until T] [--id N]... [--dry-run]",
		Short: "Re-drive dead-lettered deliveries or re-run receipts that did not apply",
		Long: `replay works on one endpoint. Given its NAME, it reads the WebhookEndpoint from the
cluster as kubectl does (--kubeconfig, else $KUBECONFIG, else ~/.kube/config; --context;
-n, else the context's namespace), and the Secrets its spec references (database URL,
signing secrets, refetch and delivery keys) with the same credentials. The database URL
in the Secret is the in-cluster one: from outside the cluster, forward a local port to
the database (kubectl port-forward) and pass --database-url.

Without NAME (inside a receiver pod, or with no cluster at all) it reads the endpoint from
--endpoint FILE or $` + config.EnvEndpoint + `, and the database URL and secrets from the
environment ($` + config.EnvDatabaseURL + `, or --database-url).

--dead-letters makes dead-lettered outbox rows due again with a fresh attempt budget; the
running dispatchers deliver them with their original Idempotency-Key. --since/--until
select by the time the row was dead-lettered.

--receipts re-runs stored receipts through the receipt transaction (for example once the
order they name exists, or once a guard is fixed): by default those whose outcome is
unmatched, guard_failed or guard_error; --outcome chooses among those and parked,
expired and unhandled (--outcome parked,expired --dry-run lists the events waiting for
their entity and those that waited longer than stateMachine.parkFor; --outcome unhandled
re-runs the events stored while a transition for their type was still rolling out). --since/--until select by the time
the receipt was received. It compiles the endpoint like the receiver does, so
it needs the same variables ($` + config.EnvSigningSecretPrefix + `<index>, and the refetch key if the
provider block has one); given NAME, it reads them from the Secrets.

Both are idempotent: a re-driven or applied row is no longer selected. --dry-run lists the
selected rows and changes nothing. Times are RFC 3339 or a duration before now ("24h").`,
	}
	fl := endpointCommand(cmd, &f.endpointFlags, func(ctx context.Context, name string, stdout, stderr io.Writer) error {
		return runReplay(ctx, f, name, stdout, stderr)
	})
	fl.BoolVar(&f.deadLetters, "dead-letters", false, "re-drive dead-lettered outbox rows")
	fl.BoolVar(&f.receipts, "receipts", false, "re-run receipts that did not apply (see --outcome)")
	fl.StringSliceVar(&f.outcomes, "outcome", nil, "with --receipts: the outcomes to re-run, of "+receipt.JoinOutcomes(receipt.ReplayableOutcomes)+" (default "+strings.Join(outbox.DefaultReplayOutcomes, ",")+")")
	addSelectionFlags(fl, &f.selectionFlags, "dead-lettered (or received)", "outbox ids with --dead-letters, receipt ids with --receipts", "replayed")
	return cmd
}

func runReplay(ctx context.Context, f replayFlags, name string, stdout, stderr io.Writer) error {
	p := replay.Params{
		Action:      v1alpha1.ReplayActionReplay,
		DeadLetters: f.deadLetters,
		Receipts:    f.receipts,
		Selection:   outbox.Selection{Outcomes: f.outcomes},
	}
	return runOnEndpoint(ctx, f.endpointFlags, &f.selectionFlags, "replayed", name, p, stdout, stderr)
}

// runOnEndpoint is what replay, discard and erase do once each has built its params p:
// it refuses NAME with --endpoint, incomplete params (a missing reason or actor) and a
// bad selection before reading the cluster or the database, sets p's selection and
// options from sel (nil for a command without selection flags; verb as in
// replayOptions), then opens the endpoint's database, runs p on it and prints the
// summary.
func runOnEndpoint(ctx context.Context, f endpointFlags, sel *selectionFlags, verb, name string, p replay.Params, stdout, stderr io.Writer) error {
	if err := f.check(name); err != nil {
		return err
	}
	if err := p.Check(replay.FlagNames); err != nil {
		return err
	}
	if sel != nil {
		if err := sel.apply(&p, verb, stdout, stderr); err != nil {
			return err
		}
	}
	db, err := openEndpointDB(ctx, f, name)
	if err != nil {
		return err
	}
	defer db.Pool.Close()
	rep, err := replay.Run(ctx, db, p)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, rep.Summary())
	return err
}

// endpointCommand makes cmd one that works on one endpoint (replay, discard, erase): at most one
// argument, NAME, the endpoint flags registered on it, and run called with NAME ("" when
// absent) under a context that SIGTERM or an interrupt cancels. It returns cmd's flags
// for the command's own.
func endpointCommand(cmd *cobra.Command, f *endpointFlags, run func(ctx context.Context, name string, stdout, stderr io.Writer) error) *pflag.FlagSet {
	cmd.Args = cobra.MaximumNArgs(1)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		name := ""
		if len(args) == 1 {
			name = args[0]
		}
		return run(ctx, name, cmd.OutOrStdout(), cmd.ErrOrStderr())
	}
	fl := cmd.Flags()
	addEndpointFlags(fl, f)
	return fl
}

// check refuses a NAME given with --endpoint, and cluster flags without NAME.
func (f endpointFlags) check(name string) error {
	if name != "" && f.endpointFile != "" {
		return fmt.Errorf("give the endpoint either as NAME (%s, read from the cluster) or as --endpoint %s, not both", name, f.endpointFile)
	}
	if name == "" && (f.kube.namespace != "" || f.kube.kubeconfig != "" || f.kube.context != "") {
		return errors.New("--namespace, --kubeconfig and --context select the cluster the endpoint NAME is read from: give NAME")
	}
	return nil
}

// selection reads --since, --until and --id; the endpoint is set by the caller.
func (f selectionFlags) selection() (outbox.Selection, error) {
	if f.batchSize < 1 {
		return outbox.Selection{}, fmt.Errorf("--batch-size must be at least 1, got %d", f.batchSize)
	}
	now := time.Now()
	since, err := parseReplayTime(f.since, now)
	if err != nil {
		return outbox.Selection{}, fmt.Errorf("--since: %w", err)
	}
	until, err := parseReplayTime(f.until, now)
	if err != nil {
		return outbox.Selection{}, fmt.Errorf("--until: %w", err)
	}
	return outbox.Selection{Since: since, Until: until, IDs: f.ids}, nil
}

// apply sets p's selection from --since, --until and --id, keeping the outcomes p
// already selects, and its options (replayOptions with verb).
func (f selectionFlags) apply(p *replay.Params, verb string, stdout, stderr io.Writer) error {
	sel, err := f.selection()
	if err != nil {
		return err
	}
	sel.Outcomes = p.Selection.Outcomes
	p.Selection = sel
	p.Options = f.replayOptions(verb, stdout, stderr)
	return nil
}

// replayOptions print progress on stderr ("<verb> done/total", "listed" in a dry run)
// and, in a dry run, one line per selected row on stdout.
func (f selectionFlags) replayOptions(verb string, stdout, stderr io.Writer) outbox.ReplayOptions {
	if f.dryRun {
		verb = "listed"
	}
	opts := outbox.ReplayOptions{
		DryRun:    f.dryRun,
		BatchSize: f.batchSize,
		Progress: func(done, total int) {
			_, _ = fmt.Fprintf(stderr, "%s %d/%d\n", verb, done, total)
		},
	}
	if f.dryRun {
		opts.Each = func(it outbox.ReplayItem) {
			_, _ = fmt.Fprintf(stdout, "%d\t%s\t%s\t%s\t%s\t%s\n", it.ID, it.At.UTC().Format(time.RFC3339), it.EntityKey, it.EventType, it.Key, it.State)
		}
	}
	return opts
}

// openEndpointDB loads the endpoint (loadEndpoint) and opens its database. The caller
// closes the pool.
func openEndpointDB(ctx context.Context, f endpointFlags, name string) (*replay.Endpoint, error) {
	we, getenv, err := loadEndpoint(ctx, f, name)
	if err != nil {
		return nil, err
	}
	db, err := replay.Open(ctx, we, getenv)
	if err != nil && name != "" && f.databaseURL == "" && getenv(config.EnvDatabaseURL) != "" {
		return nil, fmt.Errorf("%w (the URL in spec.database.urlSecretRef is the one receivers use inside the cluster: "+
			"from outside it, run kubectl -n %s port-forward to the database and pass --database-url with the local address)", err, we.Namespace)
	}
	return db, err
}

// loadEndpoint reads the endpoint, and returns it with where its secrets come
// from: the cluster given NAME, else the manifest file or $HOOKKEEPER_ENDPOINT and the
// environment. --database-url replaces the database URL of either.
func loadEndpoint(ctx context.Context, f endpointFlags, name string) (*v1alpha1.WebhookEndpoint, func(string) string, error) {
	set := map[string]string{}
	if f.databaseURL != "" {
		set[config.EnvDatabaseURL] = f.databaseURL
	}
	if name != "" {
		return fromCluster(ctx, f.kube, name, set)
	}
	if f.endpointFile == "" && strings.TrimSpace(os.Getenv(config.EnvEndpoint)) == "" {
		return nil, nil, fmt.Errorf("no endpoint: give its NAME (read from the cluster), or --endpoint FILE, or set %s", config.EnvEndpoint)
	}
	we, err := config.ReadManifest(f.endpointFile, os.Getenv)
	if err != nil {
		return nil, nil, err
	}
	getenv := func(k string) string {
		if v, ok := set[k]; ok {
			return v
		}
		return os.Getenv(k)
	}
	return we, getenv, nil
}

// parseReplayTime reads RFC 3339 or a duration before now; empty is unbounded.
func parseReplayTime(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a duration like 24h", s)
}
