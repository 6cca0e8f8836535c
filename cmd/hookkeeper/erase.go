package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/hookkeeper/hookkeeper/internal/retention"
)

func init() { rootCmd.AddCommand(newEraseCmd()) }

type eraseFlags struct {
	endpointFlags
	entity string
	reason string
	actor  string
	dryRun bool
}

func newEraseCmd() *cobra.Command {
	var f eraseFlags
	cmd := &cobra.Command{
		Use:   "erase [-n NAMESPACE] NAME --entity KEY --reason TEXT [--actor WHO] [--dry-run]",
		Short: "Remove the stored payloads of one entity's events, keeping the dedupe records, and record it",
		Long: `erase works on one endpoint's database (NAME read from the cluster with -n, --kubeconfig
and --context, or --endpoint FILE and the environment; --database-url to reach the
database from outside the cluster), for example on a data subject's request.

It removes the payload and headers of every receipt of the entity --entity KEY and the
payload of its delivered and discarded outbox rows. The receipts stay as dedupe
records (event id, type, entity key, outcome, times), so a provider's redelivery of an
erased event is still a duplicate and is not applied again. Parked events and outbox
rows still to be delivered (or dead letters) keep their payloads, which they need: erase
prints how many, so you can erase again once they are settled.

Each run is recorded in the endpoint's schema (erasures): who (--actor, default the OS
user), when, the reason and how many rows. Running it again removes nothing and is
recorded again. --dry-run counts and changes nothing. spec.retention removes every
payload after retention.payloadFor on its own.`,
	}
	fl := endpointCommand(cmd, &f.endpointFlags, func(ctx context.Context, name string, stdout, _ io.Writer) error {
		return runErase(ctx, f, name, stdout)
	})
	fl.StringVar(&f.entity, "entity", "", "the entity key whose events' payloads are removed (required)")
	fl.StringVar(&f.reason, "reason", "", "why, e.g. the request's ticket; recorded (required)")
	fl.StringVar(&f.actor, "actor", "", "who asks, recorded with the reason (default: the OS user)")
	fl.BoolVar(&f.dryRun, "dry-run", false, "count what would be removed, change and record nothing")
	return cmd
}

func runErase(ctx context.Context, f eraseFlags, name string, stdout io.Writer) error {
	if err := f.check(name); err != nil {
		return err
	}
	req := retention.Erasure{EntityKey: f.entity, Actor: f.actor, Reason: f.reason, DryRun: f.dryRun}
	if req.Actor == "" {
		req.Actor = osUser()
	}
	// Refuse an incomplete request before reading the cluster or the database.
	if err := req.Check(); err != nil {
		return fmt.Errorf("%w (give --entity and --reason, and --actor when the OS user is unknown)", err)
	}
	db, err := openEndpointDB(ctx, f.endpointFlags, name)
	if err != nil {
		return err
	}
	defer db.pool.Close()
	req.Endpoint = db.key
	rep, err := retention.Erase(ctx, db.pool, db.tables, req)
	if err != nil {
		return err
	}
	verb, recorded := "erased", fmt.Sprintf("; recorded as erasure %d by %s: %s", rep.ID, req.Actor, req.Reason)
	if f.dryRun {
		verb, recorded = "would erase", ""
	}
	_, err = fmt.Fprintf(stdout, "entity %q of %s: %s the payloads of %d receipt(s) and %d delivered or discarded outbox row(s); dedupe records kept%s\n",
		req.EntityKey, db.key, verb, rep.Receipts, rep.Deliveries, recorded)
	if err == nil && rep.KeptParked+rep.KeptUndelivered > 0 {
		_, err = fmt.Fprintf(stdout, "kept %d parked event(s) and %d outbox row(s) not yet delivered (or dead letters): they still need their payloads; erase again once they are settled\n",
			rep.KeptParked, rep.KeptUndelivered)
	}
	return err
}
