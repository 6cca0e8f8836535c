package main

import (
	"context"
	"io"
	"os"
	"os/user"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/outbox"
	"github.com/hookkeeper/hookkeeper/internal/replay"
)

func init() { rootCmd.AddCommand(newDiscardCmd()) }

type discardFlags struct {
	endpointFlags
	selectionFlags
	recordFlags
	deadLetters bool
}

func newDiscardCmd() *cobra.Command {
	var f discardFlags
	cmd := &cobra.Command{
		Use:   "discard [-n NAMESPACE] NAME --dead-letters --reason TEXT [--id N]... [--since T] [--until T] [--actor WHO] [--dry-run]",
		Short: "Decide that dead-lettered deliveries will not be delivered, and record why",
		Long: `discard works on one endpoint's dead letters, found as replay finds them (NAME read from
the cluster with -n, --kubeconfig and --context, or --endpoint FILE and the environment;
--database-url to reach the database from outside the cluster).

It marks the selected dead letters discarded: they stay in the outbox, with the discard
that took them, but no longer count as dead letters (hookkeeper_outbox_dead_letters and
its alert) and are no longer selected by replay. Each run that discards rows is recorded
in the endpoint's schema (dead_letter_discards): who (--actor, default the OS user), when,
the reason and how many.

--reason is required. --since/--until select by the time the row was dead-lettered, --id
by outbox id. --dry-run lists the selected rows and changes nothing. A discarded row is
not selected again, so a second run discards nothing. Times are RFC 3339 or a duration
before now ("24h").`,
	}
	fl := endpointCommand(cmd, &f.endpointFlags, func(ctx context.Context, name string, stdout, stderr io.Writer) error {
		return runDiscard(ctx, f, name, stdout, stderr)
	})
	fl.BoolVar(&f.deadLetters, "dead-letters", false, "discard dead-lettered outbox rows (required: what is discarded)")
	addRecordFlags(fl, &f.recordFlags, "why these dead letters will not be delivered", "who decides")
	addSelectionFlags(fl, &f.selectionFlags, "dead-lettered", "outbox ids", "discarded")
	return cmd
}

func runDiscard(ctx context.Context, f discardFlags, name string, stdout, stderr io.Writer) error {
	p := replay.Params{
		Action:      v1alpha1.ReplayActionDiscard,
		DeadLetters: f.deadLetters,
		Discard:     outbox.Discard{Actor: f.actorOrOSUser(), Reason: f.reason},
	}
	return runOnEndpoint(ctx, f.endpointFlags, &f.selectionFlags, "discarded", name, p, stdout, stderr)
}

// recordFlags are --reason and --actor of a command whose runs the endpoint's schema
// records (discard, erase).
type recordFlags struct {
	reason string
	actor  string
}

// addRecordFlags registers recordFlags on fl; why and who begin their help.
func addRecordFlags(fl *pflag.FlagSet, f *recordFlags, why, who string) {
	fl.StringVar(&f.reason, "reason", "", why+"; recorded (required)")
	fl.StringVar(&f.actor, "actor", "", who+", recorded with the reason (default: the OS user)")
}

// actorOrOSUser is --actor, else the OS user.
func (f recordFlags) actorOrOSUser() string {
	if f.actor != "" {
		return f.actor
	}
	return osUser()
}

// osUser is the name of the user running the command, "" when unknown.
func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return os.Getenv("USER")
}
