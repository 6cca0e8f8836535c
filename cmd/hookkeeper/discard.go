package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"

	"github.com/spf13/cobra"

	"github.com/hookkeeper/hookkeeper/internal/outbox"
)

func init() { rootCmd.AddCommand(newDiscardCmd()) }

type discardFlags struct {
	endpointFlags
	selectionFlags
	deadLetters bool
	reason      string
	actor       string
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
	fl.StringVar(&f.reason, "reason", "", "why these dead letters will not be delivered; recorded (required)")
	fl.StringVar(&f.actor, "actor", "", "who decides, recorded with the reason (default: the OS user)")
	addSelectionFlags(fl, &f.selectionFlags, "dead-lettered", "outbox ids", "discarded")
	return cmd
}

func runDiscard(ctx context.Context, f discardFlags, name string, stdout, stderr io.Writer) error {
	if err := f.check(name); err != nil {
		return err
	}
	if !f.deadLetters {
		return errors.New("--dead-letters is required: dead letters are what discard discards")
	}
	why := outbox.Discard{Actor: f.actor, Reason: f.reason}
	if why.Actor == "" {
		why.Actor = osUser()
	}
	// Refuse a missing reason or actor before reading the cluster or the database.
	if err := why.Check(); err != nil {
		return fmt.Errorf("%w (give --reason, and --actor when the OS user is unknown)", err)
	}
	sel, err := f.selection()
	if err != nil {
		return err
	}
	db, err := openEndpointDB(ctx, f.endpointFlags, name)
	if err != nil {
		return err
	}
	defer db.pool.Close()
	sel.Endpoint = db.key
	rep, err := outbox.DiscardDeadLetters(ctx, db.pool, db.tables, sel, why, f.replayOptions("discarded", stdout, stderr))
	if err != nil {
		return err
	}
	by := ""
	if !f.dryRun && rep.Replayed > 0 {
		by = fmt.Sprintf(" by %s: %s", why.Actor, why.Reason)
	}
	_, err = fmt.Fprintf(stdout, "dead letters of %s: %d selected, %d discarded%s%s\n", db.key, rep.Selected, rep.Replayed, by, dryRunNote(f.dryRun))
	return err
}

// osUser is the name of the user running the command, "" when unknown.
func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return os.Getenv("USER")
}
