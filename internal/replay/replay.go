// Package replay runs a replay, discard or erase on one endpoint's database: the
// orchestration `hookkeeper replay`, `hookkeeper discard` and the WebhookReplay
// controller share. Params say what (in outbox's vocabulary: Selection, ReplayOptions,
// Discard), Run does it and returns a Report whose Summary both print. runs.go records
// each WebhookReplay's run in the endpoint's database, so it runs once.
package replay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/outbox"
	"github.com/hookkeeper/hookkeeper/internal/receipt"
	"github.com/hookkeeper/hookkeeper/internal/refetch"
	"github.com/hookkeeper/hookkeeper/internal/retention"
	"github.com/hookkeeper/hookkeeper/internal/store"
)

// Endpoint is one endpoint's database, opened for a run.
type Endpoint struct {
	// Key is the endpoint key, namespace/name.
	Key    string
	Tables store.Tables
	Pool   *pgxpool.Pool
	// WE is the endpoint, defaulted; receipts are re-run with it compiled.
	WE *v1alpha1.WebhookEndpoint
	// Getenv reads the endpoint's secrets (config.EnvFromSecrets, or the environment).
	Getenv func(string) string
}

// openTimeout bounds connecting to the database.
const openTimeout = 30 * time.Second

// Open opens the database of we, whose URL getenv gives as config.EnvDatabaseURL. The
// caller closes e.Pool. Errors never contain the URL.
func Open(ctx context.Context, we *v1alpha1.WebhookEndpoint, getenv func(string) string) (*Endpoint, error) {
	url := getenv(config.EnvDatabaseURL)
	if url == "" {
		return nil, fmt.Errorf("%s is not set", config.EnvDatabaseURL)
	}
	openCtx, cancel := context.WithTimeout(ctx, openTimeout)
	pool, err := store.Open(openCtx, url, 4)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	// A schema that was never migrated (or is behind) would otherwise surface as the
	// first statement's "relation ... does not exist".
	checkCtx, cancel := context.WithTimeout(ctx, openTimeout)
	err = store.CheckSchema(checkCtx, pool, we.Spec.Database.Schema)
	cancel()
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &Endpoint{Key: we.Namespace + "/" + we.Name, Tables: store.TablesIn(we.Spec.Database.Schema), Pool: pool, WE: we, Getenv: getenv}, nil
}

// Params say what a run does.
type Params struct {
	// Action is Replay (the zero value too), Discard or Erase.
	Action v1alpha1.ReplayAction
	// DeadLetters and Receipts say what Replay works on, exactly one; Discard works on
	// dead letters only.
	DeadLetters, Receipts bool
	// Selection narrows the rows; Run sets its Endpoint. Outcomes apply to Receipts.
	Selection outbox.Selection
	// Discard is who discards and why (Discard).
	Discard outbox.Discard
	// Erasure is whose payloads, who and why (Erase); Run sets its Endpoint, and its
	// DryRun from Options.
	Erasure retention.Erasure
	// Options: dry run, batch size, and the Each and Progress callbacks.
	Options outbox.ReplayOptions
	// Logger receives the refetch client's logs when receipts are re-run.
	Logger logr.Logger
}

// Names are what a front end calls the parameters, so Check's errors speak its
// language: flags for the CLI, spec fields for a WebhookReplay.
type Names struct {
	DeadLetters, Receipts, Outcomes string
	// DiscardHint follows an error about the discard's actor or reason, EraseHint one
	// about the erasure's entity, actor or reason.
	DiscardHint, EraseHint string
}

// FlagNames are the CLI's.
var FlagNames = Names{
	DeadLetters: "--dead-letters", Receipts: "--receipts", Outcomes: "--outcome",
	DiscardHint: "(give --reason, and --actor when the OS user is unknown)",
	EraseHint:   "(give --entity and --reason, and --actor when the OS user is unknown)",
}

// SpecNames are a WebhookReplay's.
var SpecNames = Names{
	DeadLetters: "spec.deadLetters", Receipts: "spec.receipts", Outcomes: "spec.receipts.outcomes",
	DiscardHint: "(spec.reason)",
	EraseHint:   "(spec.entityKey, spec.reason)",
}

// Check reports parameters that cannot run, before anything is read: what to work on,
// outcomes that a replay cannot re-run, a discard without a reason or actor.
func (p Params) Check(n Names) error {
	switch p.Action {
	case v1alpha1.ReplayActionReplay, "":
		if p.DeadLetters == p.Receipts {
			return fmt.Errorf("choose exactly one of %s and %s", n.DeadLetters, n.Receipts)
		}
		if len(p.Selection.Outcomes) > 0 && !p.Receipts {
			return fmt.Errorf("%s selects receipts: use it with %s", n.Outcomes, n.Receipts)
		}
		for _, o := range p.Selection.Outcomes {
			if !receipt.Replayable(receipt.Outcome(o)) {
				return fmt.Errorf("%s %q: a replay re-runs only receipts whose outcome is one of %s",
					n.Outcomes, o, receipt.JoinOutcomes(receipt.ReplayableOutcomes))
			}
		}
	case v1alpha1.ReplayActionDiscard:
		if !p.DeadLetters || p.Receipts {
			return fmt.Errorf("%s is required: dead letters are what discard discards", n.DeadLetters)
		}
		if err := p.Discard.Check(); err != nil {
			if n.DiscardHint != "" {
				return fmt.Errorf("%w %s", err, n.DiscardHint)
			}
			return err
		}
	case v1alpha1.ReplayActionErase:
		if err := p.Erasure.Check(); err != nil {
			if n.EraseHint != "" {
				return fmt.Errorf("%w %s", err, n.EraseHint)
			}
			return err
		}
	default:
		return fmt.Errorf("unknown action %q: Replay, Discard or Erase", p.Action)
	}
	return nil
}

// Report sums up a run.
type Report struct {
	outbox.ReplayReport
	// Endpoint is the endpoint key.
	Endpoint string
	// Erasure is what Erase removed and kept (Selected counts the entity's rows that
	// held payloads, Replayed those it removed them from).
	Erasure retention.ErasureReport
	// Params are the run's, for Summary.
	Params Params
}

// ConfigError is an error in the endpoint's configuration (it does not compile, its
// refetch block is wrong): waiting does not change it, fixing the endpoint does. Its
// message is the wrapped error's.
type ConfigError struct{ Err error }

func (e ConfigError) Error() string { return e.Err.Error() }
func (e ConfigError) Unwrap() error { return e.Err }

// Run runs p on e's database. It does not repeat Check: the front end checks first,
// with its own names. Running it again changes nothing more: every action selects only
// rows it has not changed yet (a re-driven or applied row is no longer selected, a
// discarded one neither).
func Run(ctx context.Context, e *Endpoint, p Params) (Report, error) {
	sel := p.Selection
	sel.Endpoint = e.Key
	report := Report{Endpoint: e.Key, Params: p}
	var err error
	switch p.Action {
	case v1alpha1.ReplayActionDiscard:
		report.ReplayReport, err = outbox.DiscardDeadLetters(ctx, e.Pool, e.Tables, sel, p.Discard, p.Options)
	case v1alpha1.ReplayActionReplay, "":
		if p.DeadLetters {
			report.ReplayReport, err = outbox.RedriveDeadLetters(ctx, e.Pool, e.Tables, sel, p.Options)
			break
		}
		var reprocess outbox.Reprocess
		if !p.Options.DryRun {
			if reprocess, err = reprocessor(e, p.Logger); err != nil {
				return report, err
			}
		}
		report.ReplayReport, err = outbox.ReplayReceipts(ctx, e.Pool, e.Tables, sel, reprocess, p.Options)
	case v1alpha1.ReplayActionErase:
		req := p.Erasure
		req.Endpoint, req.DryRun = e.Key, p.Options.DryRun
		report.Erasure, err = retention.Erase(ctx, e.Pool, e.Tables, req)
		report.Selected, report.Replayed = eraseCounts(report.Erasure, req.DryRun)
	default:
		return report, fmt.Errorf("unknown action %q", p.Action)
	}
	return report, err
}

// reprocessor compiles the endpoint as the receiver does and returns its recorder's
// Reprocess.
func reprocessor(e *Endpoint, logger logr.Logger) (outbox.Reprocess, error) {
	if logger.GetSink() == nil {
		logger = logr.Discard()
	}
	// Stored receipts were verified when they arrived: no signing secret is needed to
	// re-run them (an endpoint whose secrets all expired can still replay).
	ep, err := config.CompileStored(e.WE, e.Getenv)
	if err != nil {
		return nil, ConfigError{fmt.Errorf("load endpoint: %w", err)}
	}
	recOpts, err := refetch.RecorderOptions(ep.Spec.Provider, e.Getenv, refetch.Options{Logger: logger})
	if err != nil {
		return nil, ConfigError{fmt.Errorf("configure refetch: %w", err)}
	}
	rec := receipt.NewRecorder(e.Pool, ep, recOpts...)
	return func(ctx context.Context, id int64) error {
		_, err := rec.Reprocess(ctx, id)
		if errors.Is(err, receipt.ErrReceiptNotFound) || errors.Is(err, receipt.ErrPayloadRemoved) {
			return fmt.Errorf("%w: %w", outbox.ErrReceiptGone, err)
		}
		return err
	}, nil
}

// Summary is the run's one-line result, as `hookkeeper replay` and `discard` print it
// and a WebhookReplay's status says it.
func (r Report) Summary() string {
	p := r.Params
	dry := p.Options.DryRun
	switch {
	case p.Action == v1alpha1.ReplayActionErase:
		return eraseSummary(r.Endpoint, p.Erasure, r.Erasure, dry)
	case p.Action == v1alpha1.ReplayActionDiscard:
		by := ""
		if !dry && r.Replayed > 0 {
			by = fmt.Sprintf(" by %s: %s", p.Discard.Actor, p.Discard.Reason)
		}
		return fmt.Sprintf("dead letters of %s: %d selected, %d discarded%s%s", r.Endpoint, r.Selected, r.Replayed, by, dryRunNote(dry))
	case p.DeadLetters:
		return fmt.Sprintf("dead letters of %s: %d selected, %d re-driven%s", r.Endpoint, r.Selected, r.Replayed, dryRunNote(dry))
	}
	skipped := ""
	if r.Skipped > 0 {
		skipped = fmt.Sprintf(", %d skipped (retention or an erasure removed them meanwhile)", r.Skipped)
	}
	return fmt.Sprintf("receipts of %s: %d selected, %d re-run%s%s%s", r.Endpoint, r.Selected, r.Replayed, skipped,
		outcomeSummary(r.Outcomes), dryRunNote(dry))
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

// eraseCounts are an erasure's selected rows (those of the entity that held payloads)
// and changed ones (those it removed payloads from; none in a dry run).
func eraseCounts(rep retention.ErasureReport, dry bool) (selected, changed int) {
	removed := rep.Receipts + rep.Deliveries
	if dry {
		return removed + rep.KeptParked + rep.KeptUndelivered, 0
	}
	return removed + rep.KeptParked + rep.KeptUndelivered, removed
}

func eraseSummary(endpoint string, req retention.Erasure, rep retention.ErasureReport, dry bool) string {
	verb, recorded := "erased", fmt.Sprintf("; recorded as erasure %d by %s: %s", rep.ID, req.Actor, req.Reason)
	if dry {
		verb, recorded = "would erase", ""
	}
	s := fmt.Sprintf("entity %q of %s: %s the payloads of %d receipt(s) and %d delivered or discarded outbox row(s); dedupe records kept%s",
		req.EntityKey, endpoint, verb, rep.Receipts, rep.Deliveries, recorded)
	if rep.KeptParked+rep.KeptUndelivered > 0 {
		s += fmt.Sprintf("\nkept %d parked event(s) and %d outbox row(s) not yet delivered (or dead letters): they still need their payloads; erase again once they are settled",
			rep.KeptParked, rep.KeptUndelivered)
	}
	return s
}

// The keys of an erasure's counts in a run record's outcomes.
const (
	erasedReceipts   = "erasedReceipts"
	erasedDeliveries = "erasedDeliveries"
	keptParked       = "keptParked"
	keptUndelivered  = "keptUndelivered"
	erasureID        = "erasure"
)

// Counts are the report as a run record keeps it: selected, changed, and the outcomes
// (the receipts' outcomes afterwards; for Erase, what it removed and kept, and the
// erasures row).
func (r Report) Counts() (selected, changed int64, outcomes map[string]int64) {
	outcomes = map[string]int64{}
	for k, v := range r.Outcomes {
		outcomes[k] = int64(v)
	}
	if r.Params.Action == v1alpha1.ReplayActionErase {
		e := r.Erasure
		outcomes[erasedReceipts], outcomes[erasedDeliveries] = int64(e.Receipts), int64(e.Deliveries)
		outcomes[keptParked], outcomes[keptUndelivered] = int64(e.KeptParked), int64(e.KeptUndelivered)
		if e.ID != 0 {
			outcomes[erasureID] = e.ID
		}
	}
	return int64(r.Selected), int64(r.Replayed), outcomes
}

// ReportOf rebuilds the report of a finished run from its record (Counts' inverse), so
// a result read back after a restart reads as the run's own.
func ReportOf(rec *RunRecord, p Params) Report {
	r := Report{Endpoint: rec.Endpoint, Params: p}
	r.Selected, r.Replayed = int(rec.Selected), int(rec.Changed)
	if p.Action == v1alpha1.ReplayActionErase {
		o := rec.Outcomes
		r.Erasure = retention.ErasureReport{
			ID: o[erasureID], Receipts: int(o[erasedReceipts]), Deliveries: int(o[erasedDeliveries]),
			KeptParked: int(o[keptParked]), KeptUndelivered: int(o[keptUndelivered]),
		}
		return r
	}
	if len(rec.Outcomes) > 0 {
		r.Outcomes = map[string]int{}
		for k, v := range rec.Outcomes {
			r.Outcomes[k] = int(v)
		}
	}
	return r
}
