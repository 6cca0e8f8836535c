package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/controllers"
	"github.com/hookkeeper/hookkeeper/internal/store"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// replayEnv is a namespace with an endpoint's Secrets pointing at a migrated test
// database, and a manager that runs only the WebhookReplay reconciler (so the test
// can stop it and start another, as an operator restart would).
type replayEnv struct {
	*env
	cfg    *rest.Config
	ns     string
	pool   *pgxpool.Pool
	tables store.Tables
	stop   func()
	// top is the test that owns the env: managers started by its subtests run until it
	// ends.
	top *testing.T
}

func newReplayEnv(t *testing.T) *replayEnv {
	t.Helper()
	cfg, scheme, k8s := startAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	e := &replayEnv{env: &env{ctx: ctx, k8s: k8s, scheme: scheme}, cfg: cfg, tables: store.TablesIn("hookkeeper"), top: t}
	dbURL := testsupport.MigratedDatabase(t, "hookkeeper")
	var err error
	e.pool, err = pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.pool.Close)
	e.ns = e.namespace(t)
	e.secret(t, e.ns, "stripe", map[string]string{"current": "whsec_current"})
	e.secret(t, e.ns, "db-app", map[string]string{"uri": dbURL})
	e.start(t)
	return e
}

// start runs a manager with the WebhookReplay reconciler until stop or the end of the
// test that owns e.
func (e *replayEnv) start(t *testing.T) {
	t.Helper()
	top := e.top
	mgr, err := ctrl.NewManager(e.cfg, ctrl.Options{
		Scheme:                 e.scheme,
		Cache:                  controllers.CacheOptions(),
		Client:                 controllers.ClientOptions(),
		Controller:             ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &controllers.WebhookReplayReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder(controllers.FieldOwner),
		BatchSize: 2, ProgressInterval: time.Millisecond,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	manager := testsupport.Run(top, context.Background(), "manager", timeout, mgr.Start)
	stopped := false
	e.stop = func() {
		if stopped {
			return
		}
		stopped = true
		if err := manager.Stop(top); err != nil {
			top.Errorf("manager: %v", err)
		}
	}
	top.Cleanup(e.stop)
}

func (e *replayEnv) endpoint(t *testing.T, name string) *v1alpha1.WebhookEndpoint {
	t.Helper()
	return e.create(t, validEndpoint(e.ns, name))
}

// deadLetter inserts a dead outbox row of the endpoint with attempts used up.
func (e *replayEnv) deadLetter(t *testing.T, endpoint, eventID string) int64 {
	t.Helper()
	var id int64
	err := e.pool.QueryRow(e.ctx, `INSERT INTO `+e.tables.Outbox+`
(endpoint, dedupe_key, entity_key, event_type, source_event_id, payload, occurred_at, attempts, dead_at, last_error)
VALUES ($1, $2, 'order-1', 'order.paid', $2, '{}', now(), 12, now() - interval '1 minute', 'sink answered 500')
RETURNING id`, e.ns+"/"+endpoint, eventID).Scan(&id)
	if err != nil {
		t.Fatalf("insert dead letter: %v", err)
	}
	return id
}

type outboxRow struct {
	Attempts  int
	Dead      bool
	Discarded bool
}

func (e *replayEnv) outboxRow(t *testing.T, id int64) outboxRow {
	t.Helper()
	var r outboxRow
	err := e.pool.QueryRow(e.ctx, `SELECT attempts, dead_at IS NOT NULL, discarded_at IS NOT NULL FROM `+e.tables.Outbox+` WHERE id = $1`, id).
		Scan(&r.Attempts, &r.Dead, &r.Discarded)
	if err != nil {
		t.Fatalf("read outbox row %d: %v", id, err)
	}
	return r
}

type runRow struct {
	Runs, Starts     int
	Selected, Change int64
	Actor, Reason    string
	Finished         bool
}

// run reads the replay_runs row of wr (Runs counts the rows with its UID).
func (e *replayEnv) run(t *testing.T, wr *v1alpha1.WebhookReplay) runRow {
	t.Helper()
	var r runRow
	err := e.pool.QueryRow(e.ctx, `SELECT count(*) OVER (), starts, selected, changed, actor, reason, finished_at IS NOT NULL FROM `+
		e.tables.ReplayRuns+` WHERE uid = $1`, string(wr.UID)).
		Scan(&r.Runs, &r.Starts, &r.Selected, &r.Change, &r.Actor, &r.Reason, &r.Finished)
	if err != nil {
		t.Fatalf("read replay run of %s: %v", wr.Name, err)
	}
	return r
}

func (e *replayEnv) replay(t *testing.T, name string, spec v1alpha1.WebhookReplaySpec) *v1alpha1.WebhookReplay {
	t.Helper()
	wr := &v1alpha1.WebhookReplay{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name}, Spec: spec}
	if err := e.k8s.Create(e.ctx, wr); err != nil {
		t.Fatalf("create WebhookReplay %s: %v", name, err)
	}
	return wr
}

// waitReplay waits until wr's condition has status and reason for its generation, and
// returns wr as it was then.
func (e *replayEnv) waitReplay(t *testing.T, wr *v1alpha1.WebhookReplay, condType string, status metav1.ConditionStatus, reason string) *v1alpha1.WebhookReplay {
	t.Helper()
	cur := &v1alpha1.WebhookReplay{}
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(e.k8s.Get(e.ctx, client.ObjectKeyFromObject(wr), cur)).To(Succeed())
		c := meta.FindStatusCondition(cur.Status.Conditions, condType)
		g.Expect(c).NotTo(BeNil(), "condition %s in %+v", condType, cur.Status)
		g.Expect(c.Status).To(Equal(status), "condition %s: %+v", condType, c)
		g.Expect(c.Reason).To(Equal(reason), "condition %s: %+v", condType, c)
		g.Expect(c.ObservedGeneration).To(Equal(cur.Generation))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	return cur
}

// replayEvents lists the Events about wr with reason.
func (e *replayEnv) replayEvents(t *testing.T, wr *v1alpha1.WebhookReplay, reason string) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	if err := e.k8s.List(e.ctx, &list, client.InNamespace(e.ns)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, ev := range list.Items {
		if ev.Regarding.Name == wr.Name && ev.Reason == reason {
			out = append(out, ev)
		}
	}
	return out
}

func TestWebhookReplayController(t *testing.T) {
	e := newReplayEnv(t)
	t.Run("RedrivesDeadLettersOnce", e.testRedrivesOnce)
	t.Run("ResumesAnUnfinishedRun", e.testResumes)
	t.Run("DiscardRecordsTheReason", e.testDiscard)
	t.Run("DryRunChangesNothing", e.testDryRun)
	t.Run("WaitsForTheEndpoint", e.testMissingEndpoint)
	t.Run("EraseRemovesTheEntitysPayloads", e.testErase)
	t.Run("SpecIsImmutable", e.testImmutable)
}

// A WebhookReplay re-drives the selected dead letters once and reports the counts; a
// restarted operator that finds its status gone copies the recorded result and runs
// nothing, even though one of the rows died again meanwhile.
func (e *replayEnv) testRedrivesOnce(t *testing.T) {
	g := NewWithT(t)
	e.endpoint(t, "redrive")
	ids := []int64{e.deadLetter(t, "redrive", "evt-1"), e.deadLetter(t, "redrive", "evt-2"), e.deadLetter(t, "redrive", "evt-3")}
	wr := e.replay(t, "redrive-all", v1alpha1.WebhookReplaySpec{EndpointRef: v1alpha1.EndpointReference{Name: "redrive"}, DeadLetters: true})

	cur := e.waitReplay(t, wr, v1alpha1.ConditionSucceeded, metav1.ConditionTrue, controllers.ReasonReplaySucceeded)
	g.Expect(cur.Status.Selected).To(Equal(int64(3)))
	g.Expect(cur.Status.Changed).To(Equal(int64(3)))
	g.Expect(cur.Status.StartedAt).NotTo(BeNil())
	g.Expect(cur.Status.CompletedAt).NotTo(BeNil())
	g.Expect(cur.Status.Message).To(Equal("dead letters of " + e.ns + "/redrive: 3 selected, 3 re-driven"))
	g.Expect(cur.Status.Actor).To(HavePrefix("WebhookReplay " + e.ns + "/redrive-all"))
	g.Expect(meta.IsStatusConditionTrue(cur.Status.Conditions, v1alpha1.ConditionReady)).To(BeTrue())
	g.Expect(meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionReconciling)).To(BeNil())
	g.Expect(meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionStalled)).To(BeNil())
	for _, id := range ids {
		g.Expect(e.outboxRow(t, id)).To(Equal(outboxRow{Attempts: 0}), "row %d", id)
	}
	run := e.run(t, cur)
	g.Expect(run).To(Equal(runRow{Runs: 1, Starts: 1, Selected: 3, Change: 3, Actor: cur.Status.Actor, Finished: true}))
	NewWithT(t).Eventually(func() int { return len(e.replayEvents(t, wr, controllers.EventReplayCompleted)) }).
		WithTimeout(timeout).WithPolling(poll).Should(Equal(1))

	// The dispatchers tried row 0 again and it died again.
	if _, err := e.pool.Exec(e.ctx, `UPDATE `+e.tables.Outbox+` SET attempts = 12, dead_at = now() WHERE id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	// The operator restarts and finds no status (as if it crashed before writing it).
	e.stop()
	startedAt := cur.Status.StartedAt.Time
	// Read it afresh: the stopped manager may have written the status once more after
	// cur was read (an Update of a stale copy is a conflict).
	g.Eventually(func() error {
		fresh := &v1alpha1.WebhookReplay{}
		if err := e.k8s.Get(e.ctx, client.ObjectKeyFromObject(cur), fresh); err != nil {
			return err
		}
		fresh.Status = v1alpha1.WebhookReplayStatus{}
		return e.k8s.Status().Update(e.ctx, fresh)
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	e.start(t)
	again := e.waitReplay(t, wr, v1alpha1.ConditionSucceeded, metav1.ConditionTrue, controllers.ReasonReplaySucceeded)
	g.Expect(again.Status.Selected).To(Equal(int64(3)))
	g.Expect(again.Status.Changed).To(Equal(int64(3)))
	g.Expect(again.Status.StartedAt.Time).To(BeTemporally("==", startedAt))
	g.Expect(e.outboxRow(t, ids[0])).To(Equal(outboxRow{Attempts: 12, Dead: true}), "the row that died again was not re-driven")
	g.Expect(e.run(t, cur)).To(Equal(run))
}

// A run that stopped midway (its record claimed, not finished, one of two rows already
// re-driven) resumes: it re-drives only the other and counts both.
func (e *replayEnv) testResumes(t *testing.T) {
	g := NewWithT(t)
	e.endpoint(t, "resume")
	first, second := e.deadLetter(t, "resume", "evt-1"), e.deadLetter(t, "resume", "evt-2")
	e.stop()
	wr := e.replay(t, "resume-all", v1alpha1.WebhookReplaySpec{EndpointRef: v1alpha1.EndpointReference{Name: "resume"}, DeadLetters: true})
	if _, err := e.pool.Exec(e.ctx, `UPDATE `+e.tables.Outbox+` SET attempts = 0, dead_at = NULL WHERE id = $1`, first); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(e.ctx, `INSERT INTO `+e.tables.ReplayRuns+` (uid, endpoint, namespace, name, action, actor, selected, changed)
VALUES ($1, $2, $3, $4, 'Replay', 'WebhookReplay', 2, 1)`, string(wr.UID), e.ns+"/resume", e.ns, wr.Name); err != nil {
		t.Fatal(err)
	}
	e.start(t)
	cur := e.waitReplay(t, wr, v1alpha1.ConditionSucceeded, metav1.ConditionTrue, controllers.ReasonReplaySucceeded)
	g.Expect(cur.Status.Selected).To(Equal(int64(2)))
	g.Expect(cur.Status.Changed).To(Equal(int64(2)))
	g.Expect(cur.Status.Message).To(ContainSubstring("(in 2 attempts)"))
	g.Expect(e.outboxRow(t, second)).To(Equal(outboxRow{Attempts: 0}))
	run := e.run(t, cur)
	g.Expect(run.Starts).To(Equal(2))
	g.Expect(run.Finished).To(BeTrue())
}

// Discard marks the selected dead letters discarded and records the reason and the
// actor with the discard and the run; the other dead letter stays.
func (e *replayEnv) testDiscard(t *testing.T) {
	g := NewWithT(t)
	e.endpoint(t, "discard")
	gone, kept := e.deadLetter(t, "discard", "evt-1"), e.deadLetter(t, "discard", "evt-2")
	wr := e.replay(t, "discard-one", v1alpha1.WebhookReplaySpec{
		EndpointRef: v1alpha1.EndpointReference{Name: "discard"}, Action: v1alpha1.ReplayActionDiscard,
		DeadLetters: true, IDs: []int64{gone}, Reason: "test order from the staging account",
	})
	cur := e.waitReplay(t, wr, v1alpha1.ConditionSucceeded, metav1.ConditionTrue, controllers.ReasonReplaySucceeded)
	g.Expect(cur.Status.Changed).To(Equal(int64(1)))
	g.Expect(cur.Status.Message).To(HaveSuffix(": test order from the staging account"))
	g.Expect(e.outboxRow(t, gone)).To(Equal(outboxRow{Attempts: 12, Dead: true, Discarded: true}))
	g.Expect(e.outboxRow(t, kept)).To(Equal(outboxRow{Attempts: 12, Dead: true}))
	var actor, reason string
	var rows int
	err := e.pool.QueryRow(e.ctx, `SELECT actor, reason, rows FROM `+e.tables.DeadLetterDiscards+` WHERE endpoint = $1`, e.ns+"/discard").
		Scan(&actor, &reason, &rows)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect([]any{actor, reason, rows}).To(Equal([]any{cur.Status.Actor, "test order from the staging account", 1}))
	g.Expect(e.run(t, cur).Reason).To(Equal("test order from the staging account"))
}

// A dry run counts and changes nothing.
func (e *replayEnv) testDryRun(t *testing.T) {
	g := NewWithT(t)
	e.endpoint(t, "dry")
	id := e.deadLetter(t, "dry", "evt-1")
	wr := e.replay(t, "dry-run", v1alpha1.WebhookReplaySpec{EndpointRef: v1alpha1.EndpointReference{Name: "dry"}, DeadLetters: true, DryRun: true})
	cur := e.waitReplay(t, wr, v1alpha1.ConditionSucceeded, metav1.ConditionTrue, controllers.ReasonReplaySucceeded)
	g.Expect(cur.Status.Selected).To(Equal(int64(1)))
	g.Expect(cur.Status.Changed).To(BeZero())
	g.Expect(cur.Status.Message).To(HaveSuffix("(dry run: nothing changed)"))
	g.Expect(e.outboxRow(t, id)).To(Equal(outboxRow{Attempts: 12, Dead: true}))
}

// A replay of an endpoint that does not exist waits (Reconciling, a Warning Event), and
// runs when the endpoint is created.
func (e *replayEnv) testMissingEndpoint(t *testing.T) {
	g := NewWithT(t)
	id := e.deadLetter(t, "later", "evt-1")
	wr := e.replay(t, "wait-for-it", v1alpha1.WebhookReplaySpec{EndpointRef: v1alpha1.EndpointReference{Name: "later"}, DeadLetters: true})
	cur := e.waitReplay(t, wr, v1alpha1.ConditionReconciling, metav1.ConditionTrue, controllers.ReasonEndpointNotFound)
	g.Expect(meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionSucceeded).Status).To(Equal(metav1.ConditionUnknown))
	g.Expect(cur.Status.Message).To(ContainSubstring(`no WebhookEndpoint "later"`))
	NewWithT(t).Eventually(func() int { return len(e.replayEvents(t, wr, controllers.EventReplayWaiting)) }).
		WithTimeout(timeout).WithPolling(poll).Should(Equal(1))

	e.endpoint(t, "later")
	cur = e.waitReplay(t, wr, v1alpha1.ConditionSucceeded, metav1.ConditionTrue, controllers.ReasonReplaySucceeded)
	g.Expect(cur.Status.Changed).To(Equal(int64(1)))
	g.Expect(e.outboxRow(t, id).Dead).To(BeFalse())
}

// Erase removes the entity's receipt payloads, keeps the dedupe record, and records
// who and why in the endpoint's erasures table; the counts reach the status.
func (e *replayEnv) testErase(t *testing.T) {
	g := NewWithT(t)
	e.endpoint(t, "erase")
	var receiptID int64
	err := e.pool.QueryRow(e.ctx, `INSERT INTO `+e.tables.Events+` (endpoint, event_id, entity_key, payload, outcome)
VALUES ($1, 'evt_alice', 'order-alice', '{"email":"alice@example.com"}', 'applied') RETURNING id`, e.ns+"/erase").Scan(&receiptID)
	g.Expect(err).NotTo(HaveOccurred())
	wr := e.replay(t, "erase-alice", v1alpha1.WebhookReplaySpec{
		EndpointRef: v1alpha1.EndpointReference{Name: "erase"}, Action: v1alpha1.ReplayActionErase,
		EntityKey: "order-alice", Reason: "erasure request 42",
	})
	cur := e.waitReplay(t, wr, v1alpha1.ConditionSucceeded, metav1.ConditionTrue, controllers.ReasonReplaySucceeded)
	g.Expect(cur.Status.Selected).To(Equal(int64(1)))
	g.Expect(cur.Status.Changed).To(Equal(int64(1)))
	g.Expect(cur.Status.Outcomes).To(HaveKeyWithValue("erasedReceipts", int64(1)))
	g.Expect(cur.Status.Message).To(HavePrefix(`entity "order-alice" of ` + e.ns + `/erase: erased the payloads of 1 receipt(s)`))
	var payloadGone bool
	g.Expect(e.pool.QueryRow(e.ctx, `SELECT payload IS NULL FROM `+e.tables.Events+` WHERE id = $1`, receiptID).Scan(&payloadGone)).To(Succeed())
	g.Expect(payloadGone).To(BeTrue())
	var actor, reason string
	g.Expect(e.pool.QueryRow(e.ctx, `SELECT actor, reason FROM `+e.tables.Erasures+` WHERE endpoint = $1`, e.ns+"/erase").Scan(&actor, &reason)).To(Succeed())
	g.Expect([]string{actor, reason}).To(Equal([]string{cur.Status.Actor, "erasure request 42"}))
}

// The API server refuses any change of the spec.
func (e *replayEnv) testImmutable(t *testing.T) {
	wr := e.replay(t, "immutable", v1alpha1.WebhookReplaySpec{EndpointRef: v1alpha1.EndpointReference{Name: "nowhere"}, DeadLetters: true})
	cur := &v1alpha1.WebhookReplay{}
	if err := e.k8s.Get(e.ctx, client.ObjectKeyFromObject(wr), cur); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Spec.DryRun = true
	err := e.k8s.Patch(e.ctx, cur, patch)
	if err == nil || !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec is immutable") {
		t.Fatalf("changing the spec: want Invalid naming immutability, got %v", err)
	}
}
