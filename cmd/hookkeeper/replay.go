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

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"

	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/outbox"
	"github.com/hookkeeper/hookkeeper/internal/receipt"
	"github.com/hookkeeper/hookkeeper/internal/refetch"
	"github.com/hookkeeper/hookkeeper/internal/store"
)

func init() { rootCmd.AddCommand(newReplayCmd()) }

type replayFlags struct {
	endpointFile string
	deadLetters  bool
	receipts     bool
	since, until string
	ids          []int64
	dryRun       bool
	batchSize    int
	outcomes     []string
}

func newReplayCmd() *cobra.Command {
	var f replayFlags
	cmd := &cobra.Command{
		Use:   "replay (--dead-letters | --receipts [--outcome O,...]) [--since T] [--until T] [--id N]... [--dry-run]",
		Short: "Re-drive dead-lettered deliveries or re-run receipts that did not apply",
		Long: `replay works on one endpoint, read from --endpoint FILE or $` + config.EnvEndpoint + `, in the
database at $` + config.EnvDatabaseURL + `.

--dead-letters makes dead-lettered outbox rows due again with a fresh attempt budget; the
running dispatchers deliver them with their original Idempotency-Key. --since/--until
select by the time the row was dead-lettered.

--receipts re-runs stored receipts through the receipt transaction (for example once the
order they name exists, or once a guard is fixed): by default those whose outcome is
unmatched, guard_failed or guard_error; --outcome chooses among those and parked and
expired (--outcome parked,expired --dry-run lists the events waiting for their entity and
those that waited longer than stateMachine.parkFor). --since/--until select by the time
the receipt was received. It compiles the endpoint like the receiver does, so
it needs the same variables ($` + config.EnvSigningSecretPrefix + `<index>, and the refetch key if the
provider block has one).

Both are idempotent: a re-driven or applied row is no longer selected. --dry-run lists the
selected rows and changes nothing. Times are RFC 3339 or a duration before now ("24h").`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			return runReplay(ctx, f, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.endpointFile, "endpoint", "", "WebhookEndpoint manifest file (default: $"+config.EnvEndpoint+")")
	fl.BoolVar(&f.deadLetters, "dead-letters", false, "re-drive dead-lettered outbox rows")
	fl.BoolVar(&f.receipts, "receipts", false, "re-run receipts that did not apply (see --outcome)")
	fl.StringSliceVar(&f.outcomes, "outcome", nil, "with --receipts: the outcomes to re-run, of unmatched, guard_failed, guard_error, parked, expired (default unmatched,guard_failed,guard_error)")
	fl.StringVar(&f.since, "since", "", "only rows dead-lettered (or received) at or after this time")
	fl.StringVar(&f.until, "until", "", "only rows dead-lettered (or received) before this time")
	fl.Int64SliceVar(&f.ids, "id", nil, "only these row ids (outbox ids with --dead-letters, receipt ids with --receipts); repeatable")
	fl.BoolVar(&f.dryRun, "dry-run", false, "list what would be replayed and change nothing")
	fl.IntVar(&f.batchSize, "batch-size", outbox.DefaultReplayBatch, "rows per step (progress is printed after each)")
	return cmd
}

func runReplay(ctx context.Context, f replayFlags, stdout, stderr io.Writer) error {
	if f.deadLetters == f.receipts {
		return errors.New("choose exactly one of --dead-letters and --receipts")
	}
	if len(f.outcomes) > 0 && !f.receipts {
		return errors.New("--outcome selects receipts: use it with --receipts")
	}
	for _, o := range f.outcomes {
		if !receipt.Replayable(receipt.Outcome(o)) {
			return fmt.Errorf("--outcome %q: a replay re-runs only unmatched, guard_failed, guard_error, parked and expired receipts", o)
		}
	}
	now := time.Now()
	since, err := parseReplayTime(f.since, now)
	if err != nil {
		return fmt.Errorf("--since: %w", err)
	}
	until, err := parseReplayTime(f.until, now)
	if err != nil {
		return fmt.Errorf("--until: %w", err)
	}
	we, err := config.ReadManifest(f.endpointFile, os.Getenv)
	if err != nil {
		return err
	}
	url := os.Getenv(config.EnvDatabaseURL)
	if url == "" {
		return fmt.Errorf("%s is not set", config.EnvDatabaseURL)
	}
	key := we.Namespace + "/" + we.Name
	tables := store.TablesIn(we.Spec.Database.Schema)

	openCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	pool, err := store.Open(openCtx, url, 4)
	cancel()
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	defer pool.Close()

	verb := "replayed"
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
	sel := outbox.Selection{Endpoint: key, Since: since, Until: until, IDs: f.ids, Outcomes: f.outcomes}

	if f.deadLetters {
		rep, err := outbox.RedriveDeadLetters(ctx, pool, tables, sel, opts)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "dead letters of %s: %d selected, %d re-driven%s\n", key, rep.Selected, rep.Replayed, dryRunNote(f.dryRun))
		return err
	}

	var reprocess outbox.Reprocess
	if !f.dryRun {
		ep, err := config.Compile(we, os.Getenv)
		if err != nil {
			return fmt.Errorf("load endpoint: %w", err)
		}
		recOpts, err := refetch.RecorderOptions(ep.Spec.Provider, os.Getenv, refetch.Options{Logger: logr.Discard()})
		if err != nil {
			return fmt.Errorf("configure refetch: %w", err)
		}
		rec := receipt.NewRecorder(pool, ep, recOpts...)
		reprocess = func(ctx context.Context, id int64) error {
			_, err := rec.Reprocess(ctx, id)
			return err
		}
	}
	rep, err := outbox.ReplayReceipts(ctx, pool, tables, sel, reprocess, opts)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "receipts of %s: %d selected, %d re-run%s%s\n", key, rep.Selected, rep.Replayed, outcomeSummary(rep.Outcomes), dryRunNote(f.dryRun))
	return err
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

func dryRunNote(dry bool) string {
	if dry {
		return " (dry run: nothing changed)"
	}
	return ""
}

func outcomeSummary(outcomes map[string]int) string {
	if len(outcomes) == 0 {
		return ""
	}
	var parts []string
	for _, o := range receipt.Outcomes {
		if n := outcomes[string(o)]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", o, n))
		}
	}
	return "; now " + strings.Join(parts, ", ")
}
