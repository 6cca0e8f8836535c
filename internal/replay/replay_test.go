package replay_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/outbox"
	"github.com/hookkeeper/hookkeeper/internal/replay"
	"github.com/hookkeeper/hookkeeper/internal/retention"
	"github.com/hookkeeper/hookkeeper/internal/store"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

func TestMain(m *testing.M) { testsupport.Main(m) }

// Check speaks the front end's language: flags for the CLI, fields for a resource.
func TestCheckNamesTheFrontEndsParameters(t *testing.T) {
	cases := []struct {
		name      string
		p         replay.Params
		flag, res string
	}{
		{"neither", replay.Params{}, "choose exactly one of --dead-letters and --receipts", "choose exactly one of spec.deadLetters and spec.receipts"},
		{"outcome without receipts", replay.Params{DeadLetters: true, Selection: outbox.Selection{Outcomes: []string{"unmatched"}}},
			"--outcome selects receipts: use it with --receipts", "spec.receipts.outcomes selects receipts: use it with spec.receipts"},
		{"applied", replay.Params{Receipts: true, Selection: outbox.Selection{Outcomes: []string{"applied"}}},
			`--outcome "applied": a replay re-runs only`, `spec.receipts.outcomes "applied": a replay re-runs only`},
		{"discard of receipts", replay.Params{Action: v1alpha1.ReplayActionDiscard, Receipts: true},
			"--dead-letters is required", "spec.deadLetters is required"},
		{"discard without reason", replay.Params{Action: v1alpha1.ReplayActionDiscard, DeadLetters: true, Discard: outbox.Discard{Actor: "ops"}},
			"a reason is required (give --reason, and --actor when the OS user is unknown)", "a reason is required (spec.reason)"},
	}
	for _, tc := range cases {
		for names, want := range map[*replay.Names]string{&replay.FlagNames: tc.flag, &replay.SpecNames: tc.res} {
			err := tc.p.Check(*names)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v, want %q", tc.name, err, want)
			}
		}
	}
	erase := replay.Params{Action: v1alpha1.ReplayActionErase, Erasure: retention.Erasure{Actor: "ops", Reason: "gdpr"}}
	for names, want := range map[*replay.Names]string{
		&replay.FlagNames: "entity key is empty (give --entity and --reason, and --actor when the OS user is unknown)",
		&replay.SpecNames: "entity key is empty (spec.entityKey, spec.reason)",
	} {
		if err := erase.Check(*names); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("erase without entity: %v, want %q", err, want)
		}
	}
	for _, ok := range []replay.Params{
		{DeadLetters: true},
		{Receipts: true, Selection: outbox.Selection{Outcomes: []string{"parked", "expired"}}},
		{Action: v1alpha1.ReplayActionDiscard, DeadLetters: true, Discard: outbox.Discard{Actor: "ops", Reason: "test"}},
		{Action: v1alpha1.ReplayActionErase, Erasure: retention.Erasure{EntityKey: "order-1", Actor: "ops", Reason: "gdpr"}},
	} {
		if err := ok.Check(replay.SpecNames); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
}

// A run's record is claimed once: a second claim of a finished run returns its result,
// of an unfinished one resumes it (Starts counts); the lock keeps a second process out.
func TestRunRecordIsClaimedOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, testsupport.MigratedDatabase(t, "hookkeeper"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	tables := store.TablesIn("hookkeeper")
	run := replay.RunRecord{UID: "0b1c", Endpoint: "shop/orders", Namespace: "shop", Name: "redrive", Action: "Replay", Actor: "WebhookReplay shop/redrive"}

	unlock, err := replay.Lock(ctx, pool, run.UID)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pgxpool.New(ctx, pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := replay.Lock(ctx, other, run.UID); !errors.Is(err, replay.ErrRunLocked) {
		t.Fatalf("a second lock: %v, want ErrRunLocked", err)
	}

	rec, fresh, err := replay.Claim(ctx, pool, tables, run)
	if err != nil || !fresh || rec.Starts != 1 || rec.Finished() {
		t.Fatalf("first claim: %+v fresh %v, %v", rec, fresh, err)
	}
	if err := replay.RecordProgress(ctx, pool, tables, run.UID, 5, 2); err != nil {
		t.Fatal(err)
	}
	rec, fresh, err = replay.Claim(ctx, pool, tables, run)
	if err != nil || fresh || rec.Starts != 2 || rec.Changed != 2 || rec.Finished() {
		t.Fatalf("claim of an unfinished run: %+v fresh %v, %v", rec, fresh, err)
	}
	rec, err = replay.Finish(ctx, pool, tables, run.UID, 5, 5, map[string]int64{"applied": 5})
	if err != nil || !rec.Finished() || rec.Outcomes["applied"] != 5 {
		t.Fatalf("finish: %+v, %v", rec, err)
	}
	rec, fresh, err = replay.Claim(ctx, pool, tables, run)
	if err != nil || fresh || rec.Starts != 2 || !rec.Finished() || rec.Changed != 5 {
		t.Fatalf("claim of a finished run: %+v fresh %v, %v", rec, fresh, err)
	}
	// Finishing again keeps the first result.
	if rec, err = replay.Finish(ctx, pool, tables, run.UID, 9, 9, nil); err != nil || rec.Changed != 5 {
		t.Fatalf("second finish: %+v, %v", rec, err)
	}

	unlock()
	unlockOther, err := replay.Lock(ctx, other, run.UID)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	unlockOther()
}
