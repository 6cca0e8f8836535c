package main

import (
	"strings"
	"testing"

	"github.com/hookkeeper/hookkeeper/internal/store"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// `hookkeeper erase -n NS NAME --entity KEY --reason ...`: an incomplete request is
// refused before anything is read; a dry run counts and records nothing; an erasure
// removes the entity's payloads, keeps its dedupe records and another entity's
// payloads, says what it kept, and is recorded; a second run removes nothing.
func TestEraseFromCluster(t *testing.T) {
	f := newClusterFixture(t)
	dbURL := testsupport.MigratedDatabase(t, "hookkeeper")
	key := f.ns + "/orders-payments"
	tables := store.TablesIn("hookkeeper")
	ctx, conn := connect(t, dbURL)
	if _, err := conn.Exec(ctx, `INSERT INTO `+tables.Events+`
(endpoint, event_id, event_type, entity_key, payload, headers, outcome) VALUES
($1, 'evt_1', 'payment_intent.succeeded', 'order-alice', '{"email":"alice@example.com"}', '{}', 'applied'),
($1, 'evt_2', 'charge.refunded', 'order-alice', '{"email":"alice@example.com"}', '{}', 'parked'),
($1, 'evt_3', 'payment_intent.succeeded', 'order-bob', '{"email":"bob@example.com"}', '{}', 'applied')`, key); err != nil {
		t.Fatal(err)
	}
	withPayload := func() int {
		return testsupport.NewRows(conn, tables).Count(t, tables.Events, "payload IS NOT NULL")
	}
	base := []string{"erase", "--kubeconfig", f.kubeconfig, "-n", f.ns, "orders-payments", "--database-url", dbURL}
	run := cliWith(t, base...)

	expectRefused(t, map[string]refusal{
		"no entity": {append(append([]string{}, base...), "--reason", "GDPR 42"), "entity key is empty"},
		"no reason": {append(append([]string{}, base...), "--entity", "order-alice"), "reason is empty"},
	})

	out, _, err := run("--entity", "order-alice", "--reason", "GDPR 42", "--actor", "dpo@example.com", "--dry-run")
	if err != nil || !strings.Contains(out, "would erase the payloads of 1 receipt(s)") || withPayload() != 3 {
		t.Fatalf("dry run: %q, %v; payloads left %d, want 3", out, err, withPayload())
	}

	out, stderr, err := run("--entity", "order-alice", "--reason", "GDPR 42", "--actor", "dpo@example.com")
	if err != nil {
		t.Fatalf("erase: %v\n%s", err, stderr)
	}
	for _, want := range []string{
		`entity "order-alice" of ` + key + `: erased the payloads of 1 receipt(s) and 0 delivered or discarded outbox row(s); dedupe records kept; recorded as erasure`,
		"by dpo@example.com: GDPR 42",
		"kept 1 parked event(s) and 0 outbox row(s)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output %q does not say %q", out, want)
		}
	}
	if got := withPayload(); got != 2 {
		t.Errorf("receipts with a payload: %d, want 2 (alice's parked event and bob's)", got)
	}
	if n := testsupport.NewRows(conn, tables).Receipts(t); n != 3 {
		t.Errorf("receipts: %d, want every dedupe record kept (3)", n)
	}
	assertNoSecrets(t, out, stderr)

	out, _, err = run("--entity", "order-alice", "--reason", "GDPR 42", "--actor", "dpo@example.com")
	if err != nil || !strings.Contains(out, "erased the payloads of 0 receipt(s)") {
		t.Errorf("second erase: %q, %v, want nothing removed", out, err)
	}
	if n := testsupport.NewRows(conn, tables).Count(t, tables.Erasures, "endpoint = $1 AND actor = 'dpo@example.com'", key); n != 2 {
		t.Errorf("erasure records: %d, want 2 (the dry run records nothing)", n)
	}
}
