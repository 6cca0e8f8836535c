package main

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/hookkeeper/hookkeeper/internal/store"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// discardRecord is one row of dead_letter_discards.
type discardRecord struct {
	Actor, Reason string
	Rows          int
}

func discardRecords(t *testing.T, dbURL, endpoint string) []discardRecord {
	t.Helper()
	ctx, conn := connect(t, dbURL)
	rows, err := conn.Query(ctx, `SELECT actor, reason, rows FROM `+store.TablesIn("hookkeeper").DeadLetterDiscards+` WHERE endpoint = $1 ORDER BY id`, endpoint)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[discardRecord])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// `hookkeeper discard -n NS NAME --dead-letters --reason ...`: the reason is required;
// a dry run lists and changes nothing; a discard of one id records who, why and how
// many, and leaves the other dead letter to replay; a second run discards nothing and
// records nothing.
func TestDiscardFromCluster(t *testing.T) {
	f := newClusterFixture(t)
	dbURL := testsupport.MigratedDatabase(t, "hookkeeper")
	key := f.ns + "/orders-payments"
	first := insertDeadLetter(t, dbURL, key, "evt-1")
	insertDeadLetter(t, dbURL, key, "evt-2")
	base := []string{"discard", "--kubeconfig", f.kubeconfig, "-n", f.ns, "orders-payments", "--database-url", dbURL, "--dead-letters"}
	run := cliWith(t, base...)

	expectRefused(t, map[string]refusal{
		"no reason":       {append(append([]string{}, base...), "--id", itoa(int(first))), "a reason is required"},
		"blank reason":    {append(append([]string{}, base...), "--reason", "  "), "a reason is required"},
		"what to discard": {[]string{"discard", "--kubeconfig", f.kubeconfig, "orders-payments", "--database-url", dbURL, "--reason", "x"}, "--dead-letters is required"},
	})
	if recs := discardRecords(t, dbURL, key); len(recs) != 0 {
		t.Fatalf("refused runs recorded %+v", recs)
	}

	reason := "test orders sent from the provider's staging account"
	stdout, stderr, err := run("--id", itoa(int(first)), "--reason", reason, "--actor", "alice", "--dry-run")
	if err != nil {
		t.Fatalf("dry run: %v\nstderr: %s", err, stderr)
	}
	if want := "dead letters of " + key + ": 1 selected, 0 discarded (dry run: nothing changed)"; !strings.Contains(stdout, want) ||
		!strings.HasPrefix(stdout, itoa(int(first))+"\t") || !strings.Contains(stdout, "evt-1\tsink answered 500") {
		t.Errorf("dry run stdout %q, want the row and %q", stdout, want)
	}
	if recs := discardRecords(t, dbURL, key); len(recs) != 0 {
		t.Fatalf("the dry run recorded %+v", recs)
	}

	stdout, stderr, err = run("--id", itoa(int(first)), "--reason", reason, "--actor", "alice")
	if err != nil {
		t.Fatalf("discard: %v\nstderr: %s", err, stderr)
	}
	if want := "dead letters of " + key + ": 1 selected, 1 discarded by alice: " + reason; !strings.Contains(stdout, want) {
		t.Errorf("stdout %q, want %q", stdout, want)
	}
	if recs := discardRecords(t, dbURL, key); len(recs) != 1 || recs[0] != (discardRecord{Actor: "alice", Reason: reason, Rows: 1}) {
		t.Errorf("records %+v, want alice's one row", recs)
	}
	assertNoSecrets(t, stdout, stderr)

	// Again: nothing left to discard under that id, nothing recorded.
	stdout, _, err = run("--id", itoa(int(first)), "--reason", reason)
	if err != nil || !strings.Contains(stdout, ": 0 selected, 0 discarded") {
		t.Errorf("second discard: %q, %v", stdout, err)
	}
	if recs := discardRecords(t, dbURL, key); len(recs) != 1 {
		t.Errorf("the second discard was recorded: %+v", recs)
	}
	// The actor defaults to the OS user; replay sees only the dead letter left.
	stdout, _, err = runCLI(t, "replay", "--kubeconfig", f.kubeconfig, "orders-payments", "--database-url", dbURL, "--dead-letters", "--dry-run")
	if err != nil || !strings.Contains(stdout, "1 selected") || !strings.Contains(stdout, "evt-2") || strings.Contains(stdout, "evt-1\t") {
		t.Errorf("replay after the discard: %q, %v", stdout, err)
	}
	if _, _, err := run("--reason", "the rest too"); err != nil {
		t.Fatal(err)
	}
	if recs := discardRecords(t, dbURL, key); len(recs) != 2 || recs[1].Actor != osUser() || recs[1].Rows != 1 {
		t.Errorf("records %+v, want a second by %q", recs, osUser())
	}
}

// Mistakes a person makes at the command line get a message that says what to do: a
// batch size below 1, and a database whose schema was never migrated (instead of the
// first statement's "relation ... does not exist").
func TestReplayRefusesWhatCannotWork(t *testing.T) {
	manifest := testsupport.StripeEndpointFile(t, "http://127.0.0.1:1/")
	unmigrated := testsupport.NewDatabase(t)
	expectRefused(t, map[string]refusal{
		"batch size below 1": {[]string{"replay", "--endpoint", manifest, "--database-url", unmigrated,
			"--dead-letters", "--batch-size", "-5"}, "--batch-size must be at least 1, got -5"},
		"unmigrated schema": {[]string{"replay", "--endpoint", manifest, "--database-url", unmigrated,
			"--dead-letters"}, "does not exist; run hookkeeper migrate"},
		"discard, unmigrated schema": {[]string{"discard", "--endpoint", manifest, "--database-url", unmigrated,
			"--dead-letters", "--reason", "x"}, "does not exist; run hookkeeper migrate"},
	})
}
