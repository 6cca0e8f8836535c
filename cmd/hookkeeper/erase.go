package main

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/outbox"
	"github.com/hookkeeper/hookkeeper/internal/replay"
	"github.com/hookkeeper/hookkeeper/internal/retention"
)

func init() { rootCmd.AddCommand(newEraseCmd()) }

type eraseFlags struct {
	endpointFlags
	recordFlags
	entity string
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
	fl := endpointCommand(cmd, &f.endpointFlags, func(ctx context.Context, name string, stdout, stderr io.Writer) error {
		return runErase(ctx, f, name, stdout, stderr)
	})
	fl.StringVar(&f.entity, "entity", "", "the entity key whose events' payloads are removed (required)")
	addRecordFlags(fl, &f.recordFlags, "why, e.g. the request's ticket", "who asks")
	fl.BoolVar(&f.dryRun, "dry-run", false, "count what would be removed, change and record nothing")
	return cmd
}

func runErase(ctx context.Context, f eraseFlags, name string, stdout, stderr io.Writer) error {
	p := replay.Params{
		Action:  v1alpha1.ReplayActionErase,
		Erasure: retention.Erasure{EntityKey: f.entity, Actor: f.actorOrOSUser(), Reason: f.reason},
		Options: outbox.ReplayOptions{DryRun: f.dryRun},
	}
	// No selection flags: erase selects by --entity.
	return runOnEndpoint(ctx, f.endpointFlags, nil, "", name, p, stdout, stderr)
}
