package replay_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/outbox"
	"github.com/hookkeeper/hookkeeper/internal/receipt"
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

const replaySchema = "hk"

func replayRef(name, key string) corev1.SecretKeySelector {
	return corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
}

func replayEndpoint(transitions ...v1alpha1.Transition) *v1alpha1.WebhookEndpoint {
	if len(transitions) == 0 {
		transitions = []v1alpha1.Transition{
			{Name: "capture", On: []string{"payment_intent.succeeded"}, From: []string{"payment_pending"}, To: "paid",
				Guard: "event.amount == entity.amount", Emit: "order.paid"},
			{Name: "refund", On: []string{"charge.refunded"}, From: []string{"paid"}, To: "refunded", Emit: "order.refunded"},
		}
	}
	we := &v1alpha1.WebhookEndpoint{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop"},
		Spec: v1alpha1.WebhookEndpointSpec{
			Provider:       v1alpha1.ProviderSpec{Type: v1alpha1.ProviderStripe},
			SigningSecrets: []v1alpha1.SigningSecret{{SecretKeyRef: replayRef("s", "k")}},
			Database:       v1alpha1.DatabaseSpec{URLSecretRef: replayRef("db", "uri"), Schema: replaySchema},
			Entity:         v1alpha1.EntitySpec{OnUnmatched: v1alpha1.UnmatchedRecord},
			StateMachine: v1alpha1.StateMachineSpec{
				Initial:     "payment_pending",
				States:      []string{"payment_pending", "paid", "refunded", "disputed"},
				Transitions: transitions,
			},
			Delivery: v1alpha1.DeliverySpec{Sink: v1alpha1.SinkSpec{URL: "http://sink.local/"}},
		},
	}
	we.Spec.Default()
	return we
}

type replayFixture struct {
	t      *testing.T
	ctx    context.Context
	getenv func(string) string
	e      *replay.Endpoint
	rec    *receipt.Recorder
}

func newReplayFixture(t *testing.T, we *v1alpha1.WebhookEndpoint) *replayFixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	url := testsupport.MigratedDatabase(t, replaySchema)
	env := map[string]string{config.EnvDatabaseURL: url, config.EnvSigningSecretPrefix + "0": "whsec_test"}
	getenv := func(k string) string { return env[k] }
	e, err := replay.Open(ctx, we, getenv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Pool.Close)
	ep, err := config.Compile(we, getenv)
	if err != nil {
		t.Fatal(err)
	}
	return &replayFixture{t: t, ctx: ctx, getenv: getenv, e: e, rec: receipt.NewRecorder(e.Pool, ep)}
}

func (f *replayFixture) exec(sql string, args ...any) {
	f.t.Helper()
	if _, err := f.e.Pool.Exec(f.ctx, sql, args...); err != nil {
		f.t.Fatalf("exec %q: %v", sql, err)
	}
}

func (f *replayFixture) str(sql string, args ...any) string {
	f.t.Helper()
	return testsupport.Value[string](f.t, f.ctx, f.e.Pool, sql, args...)
}

func (f *replayFixture) count(sql string, args ...any) int {
	f.t.Helper()
	return testsupport.Value[int](f.t, f.ctx, f.e.Pool, sql, args...)
}

func replayEvent(id, typ, key string, amount int64) receipt.Event {
	e := receipt.Event{ID: id, Type: typ, EntityKey: key, Payload: []byte(`{"id":"` + id + `","type":"` + typ + `"}`),
		Headers: map[string]string{"user-agent": "test"}}
	if amount != 0 {
		e.Amount = &amount
	}
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	e.OccurredAt = &at
	return e
}

func (f *replayFixture) record(ev receipt.Event) receipt.Result {
	f.t.Helper()
	res, err := f.rec.Record(f.ctx, ev)
	if err != nil {
		f.t.Fatalf("Record(%s): %v", ev.ID, err)
	}
	return res
}

// docs/operations.md: "A receipt replay (`hookkeeper replay --receipts`) re-runs only
// receipts that still have their payload". Retention prunes payloads every 10 minutes
// on every endpoint, concurrently with any replay. A receipt that was selected (it had
// its payload when the run listed its batch) and whose payload retention removes before
// the run reaches it should be skipped like one pruned before the run; the rest of the
// run should still apply. Here the payload of the second of three receipts is removed
// (the statement retention runs) while the run handles the first.
func TestReplayRunSurvivesAPayloadPrunedMidRun(t *testing.T) {
	f := newReplayFixture(t, replayEndpoint())
	var ids []int64
	for i := 1; i <= 3; i++ {
		r := f.record(replayEvent(fmt.Sprintf("evt_%d", i), "payment_intent.succeeded", fmt.Sprintf("order-%d", i), 100))
		if r.Outcome != receipt.OutcomeUnmatched {
			t.Fatalf("evt_%d: %+v, want unmatched", i, r)
		}
		ids = append(ids, r.ReceiptID)
	}
	for i := 1; i <= 3; i++ {
		f.exec(`INSERT INTO hk.entities (endpoint, entity_key, state, amount) VALUES ($1, $2, 'payment_pending', 100)`,
			f.e.Key, fmt.Sprintf("order-%d", i))
	}
	pruned := false
	p := replay.Params{Receipts: true, Options: outbox.ReplayOptions{Each: func(it outbox.ReplayItem) {
		if it.ID == ids[0] && !pruned {
			pruned = true
			// What retention's prunePayloads does to a receipt older than payloadFor.
			f.exec(`UPDATE hk.webhook_events SET payload = NULL, headers = NULL, payload_removed_at = now() WHERE id = $1`, ids[1])
		}
	}}}
	if err := p.Check(replay.FlagNames); err != nil {
		t.Fatal(err)
	}
	rep, err := replay.Run(f.ctx, f.e, p)
	third := f.str(`SELECT outcome FROM hk.webhook_events WHERE id = $1`, ids[2])
	if err != nil || third != "applied" {
		t.Fatalf("a payload pruned mid-run aborted the replay: err = %v; receipt 3 is %q (want applied); report %+v", err, third, rep.ReplayReport)
	}
}

// Replays of unmatched receipts, run three times at once (two operators, a
// WebhookReplay), while the provider retries the same events and new live events for
// the same entities arrive, apply each receipt exactly once: one outbox row per applied
// event, under the key a first delivery would have used.
func TestConcurrentReplaysAndLiveTrafficApplyOnce(t *testing.T) {
	f := newReplayFixture(t, replayEndpoint())
	const n = 40
	for i := range n {
		if r := f.record(replayEvent(fmt.Sprintf("cap_%d", i), "payment_intent.succeeded", fmt.Sprintf("o-%d", i), 100)); r.Outcome != receipt.OutcomeUnmatched {
			t.Fatalf("cap_%d: %+v", i, r)
		}
	}
	for i := range n {
		f.exec(`INSERT INTO hk.entities (endpoint, entity_key, state, amount) VALUES ($1, $2, 'payment_pending', 100)`,
			f.e.Key, fmt.Sprintf("o-%d", i))
	}
	live := receipt.NewRecorder(f.e.Pool, mustCompile(t, f.e.WE, f.getenv))
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 3 {
		wg.Go(func() {
			p := replay.Params{Receipts: true, Options: outbox.ReplayOptions{BatchSize: 7}}
			if _, err := replay.Run(f.ctx, f.e, p); err != nil {
				errs <- fmt.Errorf("replay: %w", err)
			}
		})
	}
	wg.Go(func() {
		for i := range n {
			// A provider retry of the unmatched event, and the refund that follows it.
			if _, err := live.Record(f.ctx, replayEvent(fmt.Sprintf("cap_%d", i), "payment_intent.succeeded", fmt.Sprintf("o-%d", i), 100)); err != nil {
				errs <- err
				return
			}
			if _, err := live.Record(f.ctx, replayEvent(fmt.Sprintf("ref_%d", i), "charge.refunded", fmt.Sprintf("o-%d", i), 100)); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Whatever order: the refunds parked or applied; release anything parked by a last replay.
	if _, err := replay.Run(f.ctx, f.e, replay.Params{Receipts: true, Selection: outbox.Selection{Outcomes: []string{"parked"}}}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		key := fmt.Sprintf("o-%d", i)
		if st := f.str(`SELECT state FROM hk.entities WHERE entity_key = $1`, key); st != "refunded" {
			t.Errorf("%s: state %s, want refunded (%s)", key, st,
				f.str(`SELECT string_agg(event_id || '=' || outcome, ', ') FROM hk.webhook_events WHERE entity_key = $1`, key))
		}
		want := receipt.DedupeKey(f.e.Key, fmt.Sprintf("cap_%d", i), "order.paid")
		if got := f.count(`SELECT count(*) FROM hk.outbox WHERE entity_key = $1 AND event_type = 'order.paid'`, key); got != 1 {
			t.Errorf("%s: %d order.paid rows, want 1", key, got)
		}
		if got := f.count(`SELECT count(*) FROM hk.outbox WHERE dedupe_key = $1`, want); got != 1 {
			t.Errorf("%s: no order.paid row under the first-delivery key", key)
		}
	}
	if got := f.count(`SELECT count(*) FROM hk.webhook_events`); got != 2*n {
		t.Errorf("receipts = %d, want %d", got, 2*n)
	}
}

func mustCompile(t *testing.T, we *v1alpha1.WebhookEndpoint, getenv func(string) string) *config.Endpoint {
	t.Helper()
	ep, err := config.Compile(we, getenv)
	if err != nil {
		t.Fatal(err)
	}
	return ep
}

// docs/rotation.md: when every signing secret has expired the receiver is scaled to
// zero and providers retry "until a current secret is added". Stored receipts were
// verified when they arrived; re-running them needs no signing secret. Yet a receipt
// replay of such an endpoint (as `hookkeeper replay NAME` and the WebhookReplay
// controller build it, through config.EnvFromSecrets, which does not read expired
// secrets) fails to compile the endpoint, so the unmatched receipts recorded before the
// expiry cannot be re-run until a new secret is configured.
func TestReceiptReplayOfAnEndpointWhoseSecretsExpired(t *testing.T) {
	f := newReplayFixture(t, replayEndpoint())
	r := f.record(replayEvent("evt_before_expiry", "payment_intent.succeeded", "o-9", 100))
	if r.Outcome != receipt.OutcomeUnmatched {
		t.Fatalf("%+v", r)
	}
	f.exec(`INSERT INTO hk.entities (endpoint, entity_key, state, amount) VALUES ($1, 'o-9', 'payment_pending', 100)`, f.e.Key)
	we := replayEndpoint()
	past := metav1.NewTime(time.Now().Add(-time.Hour))
	we.Spec.SigningSecrets[0].ExpiresAt = &past
	secrets := map[string]string{"db/uri": f.getenv(config.EnvDatabaseURL), "s/k": "whsec_test"}
	getenv, err := config.EnvFromSecrets(we, func(name, key string) (string, error) {
		v, ok := secrets[name+"/"+key]
		if !ok {
			return "", fmt.Errorf("no secret %s/%s", name, key)
		}
		return v, nil
	}, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	e, err := replay.Open(f.ctx, we, getenv)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Pool.Close()
	rep, err := replay.Run(f.ctx, e, replay.Params{Receipts: true})
	if err != nil {
		t.Fatalf("receipt replay of an endpoint whose signing secrets all expired: %v (report %+v)", err, rep.ReplayReport)
	}
	if got := f.str(`SELECT outcome FROM hk.webhook_events WHERE id = $1`, r.ReceiptID); got != "applied" {
		t.Fatalf("receipt is %s, want applied", got)
	}
}

// Every action's dry run (Replay of dead letters and of receipts with each outcome,
// Discard, Erase) lists or counts and changes nothing, in any table; the counts are
// those the real run then changes.
func TestDryRunsChangeNothing(t *testing.T) {
	f := newReplayFixture(t, replayEndpoint())
	un := f.record(replayEvent("evt_un", "payment_intent.succeeded", "o-1", 100))
	f.exec(`INSERT INTO hk.entities (endpoint, entity_key, state, amount) VALUES ($1, 'o-1', 'payment_pending', 100)`, f.e.Key)
	f.exec(`INSERT INTO hk.entities (endpoint, entity_key, state, amount) VALUES ($1, 'o-2', 'payment_pending', 100)`, f.e.Key)
	if r := f.record(replayEvent("evt_park", "charge.refunded", "o-2", 100)); r.Outcome != receipt.OutcomeParked {
		t.Fatalf("%+v", r)
	}
	f.exec(`INSERT INTO hk.outbox (endpoint, dedupe_key, entity_key, event_type, source_event_id, payload, dead_at, last_error)
VALUES ($1, 'k-dead', 'o-1', 'order.paid', 'x', '{"a":1}', now() - interval '1 hour', 'sink answered 500'),
       ($1, 'k-done', 'o-1', 'order.paid', 'y', '{"a":1}', NULL, NULL)`, f.e.Key)
	f.exec(`UPDATE hk.outbox SET delivered_at = now() WHERE dedupe_key = 'k-done'`)
	snapshot := func() string {
		var parts []string
		for _, tbl := range []string{"webhook_events", "outbox", "entities", "dead_letter_discards", "erasures"} {
			parts = append(parts, tbl+"="+f.str(fmt.Sprintf(`SELECT COALESCE(md5(string_agg(t::text, '|' ORDER BY t::text)), '') FROM hk.%s t`, tbl)))
		}
		return strings.Join(parts, " ")
	}
	before := snapshot()
	dry := outbox.ReplayOptions{DryRun: true}
	cases := []struct {
		name string
		p    replay.Params
		want int
	}{
		{"dead letters", replay.Params{DeadLetters: true, Options: dry}, 1},
		{"receipts", replay.Params{Receipts: true, Options: dry}, 1},
		{"parked receipts", replay.Params{Receipts: true, Selection: outbox.Selection{Outcomes: []string{"parked", "expired"}}, Options: dry}, 1},
		{"discard", replay.Params{Action: v1alpha1.ReplayActionDiscard, DeadLetters: true, Discard: outbox.Discard{Actor: "ops", Reason: "r"}, Options: dry}, 1},
		{"erase", replay.Params{Action: v1alpha1.ReplayActionErase, Erasure: retention.Erasure{EntityKey: "o-1", Actor: "ops", Reason: "r"}, Options: dry}, 3},
	}
	for _, tc := range cases {
		if err := tc.p.Check(replay.SpecNames); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		rep, err := replay.Run(f.ctx, f.e, tc.p)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if rep.Selected != tc.want || rep.Replayed != 0 {
			t.Errorf("%s dry run: selected %d changed %d, want %d and 0 (%s)", tc.name, rep.Selected, rep.Replayed, tc.want, rep.Summary())
		}
		if after := snapshot(); after != before {
			t.Errorf("%s dry run changed the database:\n before %s\n after  %s", tc.name, before, after)
			before = after
		}
	}
	_ = un
}
