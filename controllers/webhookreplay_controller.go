package controllers

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/outbox"
	"github.com/hookkeeper/hookkeeper/internal/replay"
	"github.com/hookkeeper/hookkeeper/internal/retention"
	"github.com/hookkeeper/hookkeeper/internal/store"
)

// Condition reasons of a WebhookReplay. Each one that needs a person says what to do in
// the message.
const (
	ReasonReplayRunning = "Running"
	// ReasonReplaySucceeded: the run finished (a dry run too).
	ReasonReplaySucceeded = "Succeeded"
	// ReasonEndpointNotFound: the referenced WebhookEndpoint does not exist (yet); the
	// replay waits for it.
	ReasonEndpointNotFound = "EndpointNotFound"
	// ReasonInvalidSpec: the spec selects nothing that can run; it is immutable, so a
	// new WebhookReplay is the fix.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonSecretsUnresolved: a Secret key the endpoint references cannot be read.
	ReasonSecretsUnresolved = "SecretsUnresolved"
	// ReasonDatabaseUnreachable: the endpoint's database does not answer; retried with
	// backoff.
	ReasonDatabaseUnreachable = "DatabaseUnreachable"
	// ReasonEndpointInvalid: the endpoint does not compile (receipts are re-run with it).
	ReasonEndpointInvalid = "EndpointInvalid"
	// ReasonRunningElsewhere: another operator process holds the run's lock.
	ReasonRunningElsewhere = "RunningElsewhere"
	// ReasonRunInterrupted: the run failed midway; it resumes with backoff.
	ReasonRunInterrupted = "RunInterrupted"
)

// Event reasons of a WebhookReplay.
const (
	EventReplayCompleted = "ReplayCompleted"
	EventReplayWaiting   = "ReplayWaiting"
	EventReplayFailed    = "ReplayFailed"
)

// How long a waiting WebhookReplay waits before it looks again, besides the watches.
const (
	replayEndpointPoll = 30 * time.Second
	replaySchemaPoll   = 15 * time.Second
	replayLockedPoll   = 10 * time.Second
	replayStalledPoll  = time.Minute
	// DefaultReplayProgressInterval is how often a run's progress is written to its
	// status at most.
	DefaultReplayProgressInterval = 2 * time.Second
)

// replayEndpointIndex indexes WebhookReplays by spec.endpointRef.name.
const replayEndpointIndex = ".spec.endpointRef.name"

// WebhookReplayReconciler runs each WebhookReplay once, in the operator's process, on
// the database of the WebhookEndpoint it names. Runs are recorded in that database
// (replay_runs, keyed by the resource's UID) before anything changes, so a run is never
// started twice, even when the operator restarts between the run and the status write.
type WebhookReplayReconciler struct {
	client.Client
	// APIReader reads the endpoint's Secrets, which the manager does not cache; nil
	// means Client.
	APIReader client.Reader
	// Recorder emits Events on the WebhookReplay.
	Recorder events.EventRecorder
	// BatchSize is the rows per step; outbox.DefaultReplayBatch when zero.
	BatchSize int
	// ProgressInterval is how often progress reaches the status at most;
	// DefaultReplayProgressInterval when zero.
	ProgressInterval time.Duration
}

// +kubebuilder:rbac:groups=hookkeeper.dev,resources=webhookreplays,verbs=get;list;watch
// +kubebuilder:rbac:groups=hookkeeper.dev,resources=webhookreplays/status,verbs=get;patch;update

// SetupWithManager registers the reconciler, the endpointRef index and the watch on
// WebhookEndpoints (a replay waiting for its endpoint starts when it appears).
func (r *WebhookReplayReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.APIReader = cmp.Or(r.APIReader, mgr.GetAPIReader())
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1alpha1.WebhookReplay{}, replayEndpointIndex,
		func(obj client.Object) []string {
			if wr, ok := obj.(*v1alpha1.WebhookReplay); ok {
				return []string{wr.Spec.EndpointRef.Name}
			}
			return nil
		}); err != nil {
		return fmt.Errorf("index WebhookReplays by endpoint: %w", err)
	}
	err := ctrl.NewControllerManagedBy(mgr).
		Named("webhookreplay").
		For(&v1alpha1.WebhookReplay{}).
		Watches(&v1alpha1.WebhookEndpoint{}, handler.EnqueueRequestsFromMapFunc(r.replaysForEndpoint)).
		// A long run must not hold up every other replay.
		WithOptions(controller.Options{MaxConcurrentReconciles: 2}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("build WebhookReplay controller: %w", err)
	}
	return nil
}

// replaysForEndpoint maps an endpoint to the replays in its namespace that name it and
// have not finished.
func (r *WebhookReplayReconciler) replaysForEndpoint(ctx context.Context, obj client.Object) []reconcile.Request {
	var list v1alpha1.WebhookReplayList
	if err := r.List(ctx, &list, client.InNamespace(obj.GetNamespace()),
		client.MatchingFields{replayEndpointIndex: obj.GetName()}); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if !replayDone(&list.Items[i]) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return reqs
}

// replayDone reports whether the status says the run is over for good: finished, or a
// spec that can never run (the spec is immutable).
func replayDone(wr *v1alpha1.WebhookReplay) bool {
	c := meta.FindStatusCondition(wr.Status.Conditions, v1alpha1.ConditionSucceeded)
	if c == nil || c.ObservedGeneration != wr.Generation {
		return false
	}
	return c.Status == metav1.ConditionTrue ||
		(c.Status == metav1.ConditionFalse && c.Reason == ReasonInvalidSpec)
}

// replayState carries one reconcile of a WebhookReplay.
type replayState struct {
	wr       *v1alpha1.WebhookReplay
	original *v1alpha1.WebhookReplay
}

// Reconcile runs the WebhookReplay unless its status or its record in the endpoint's
// database says it ran, and writes what happened to the status.
func (r *WebhookReplayReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	wr := &v1alpha1.WebhookReplay{}
	if err := r.Get(ctx, req.NamespacedName, wr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !wr.DeletionTimestamp.IsZero() || replayDone(wr) {
		return ctrl.Result{}, nil
	}
	rs := &replayState{wr: wr, original: wr.DeepCopy()}
	res, err := r.reconcile(ctx, rs)
	if err != nil && !errors.Is(err, context.Canceled) {
		log.FromContext(ctx).V(1).Info("replay not done, will retry", "error", err.Error())
	}
	if statusErr := r.patchStatus(ctx, rs); statusErr != nil {
		return ctrl.Result{}, errors.Join(err, statusErr)
	}
	return res, err
}

func (r *WebhookReplayReconciler) reconcile(ctx context.Context, rs *replayState) (ctrl.Result, error) {
	wr := rs.wr
	spec := wr.Spec.DeepCopy()
	spec.Default()
	actor := replayActor(wr)
	wr.Status.Actor = actor
	p := replayParams(spec, actor)
	p.Logger = log.FromContext(ctx)
	p.Options.BatchSize = r.BatchSize
	if err := p.Check(replay.SpecNames); err != nil {
		r.stalled(rs, ReasonInvalidSpec, fmt.Sprintf("%s; nothing ran; the spec is immutable: delete this WebhookReplay and create a corrected one", err))
		return ctrl.Result{}, nil
	}

	we := &v1alpha1.WebhookEndpoint{}
	err := r.Get(ctx, client.ObjectKey{Namespace: wr.Namespace, Name: spec.EndpointRef.Name}, we)
	if apierrors.IsNotFound(err) {
		r.waiting(rs, ReasonEndpointNotFound, fmt.Sprintf("no WebhookEndpoint %q in namespace %q; the replay runs once it exists (kubectl -n %s get webhookendpoints lists them)",
			spec.EndpointRef.Name, wr.Namespace, wr.Namespace))
		return ctrl.Result{RequeueAfter: replayEndpointPoll}, nil
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("get WebhookEndpoint %s/%s: %w", wr.Namespace, spec.EndpointRef.Name, err)
	}
	we.Spec.Default()

	getenv, err := r.endpointEnv(ctx, we)
	if err != nil {
		r.stalled(rs, ReasonSecretsUnresolved, fmt.Sprintf("WebhookEndpoint %s: %s; the replay runs once the Secret key can be read", we.Name, err))
		return ctrl.Result{RequeueAfter: replayStalledPoll}, nil
	}
	ep, err := replay.Open(ctx, we, getenv)
	if err != nil {
		ref := we.Spec.Database.URLSecretRef
		r.waiting(rs, ReasonDatabaseUnreachable, fmt.Sprintf("%s (the URL of Secret %s key %q); the operator retries with backoff, so its pods must reach the database",
			oneLine(err.Error()), ref.Name, ref.Key))
		return ctrl.Result{}, err
	}
	defer ep.Pool.Close()
	if err := store.CheckSchema(ctx, ep.Pool, we.Spec.Database.Schema); err != nil {
		if errors.Is(err, store.ErrSchemaNotReady) {
			r.waiting(rs, ReasonWaiting, fmt.Sprintf("%s; the endpoint's migration Job brings it up to date", err))
			return ctrl.Result{RequeueAfter: replaySchemaPoll}, nil
		}
		r.waiting(rs, ReasonDatabaseUnreachable, oneLine(err.Error()))
		return ctrl.Result{}, err
	}
	return r.run(ctx, rs, ep, p, spec)
}

// run claims the run's record and runs it, or copies the result of a finished one.
func (r *WebhookReplayReconciler) run(ctx context.Context, rs *replayState, ep *replay.Endpoint, p replay.Params, spec *v1alpha1.WebhookReplaySpec) (ctrl.Result, error) {
	wr := rs.wr
	unlock, err := replay.Lock(ctx, ep.Pool, string(wr.UID))
	if errors.Is(err, replay.ErrRunLocked) {
		r.waiting(rs, ReasonRunningElsewhere, "another operator process is running this replay (it holds its lock in the endpoint's database); waiting for it")
		return ctrl.Result{RequeueAfter: replayLockedPoll}, nil
	}
	if err != nil {
		r.waiting(rs, ReasonDatabaseUnreachable, oneLine(err.Error()))
		return ctrl.Result{}, err
	}
	defer unlock()

	specJSON, err := json.Marshal(spec)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("encode spec: %w", err)
	}
	rec, fresh, err := replay.Claim(ctx, ep.Pool, ep.Tables, replay.RunRecord{
		UID: string(wr.UID), Endpoint: ep.Key, Namespace: wr.Namespace, Name: wr.Name,
		Action: string(spec.Action), Actor: p.Discard.Actor, Reason: spec.Reason, DryRun: spec.DryRun, Spec: specJSON,
	})
	if err != nil {
		r.waiting(rs, ReasonDatabaseUnreachable, oneLine(err.Error()))
		return ctrl.Result{}, err
	}
	if rec.Finished() {
		r.finished(rs, rec, p)
		return ctrl.Result{}, nil
	}

	// Resuming: the rows changed before are no longer selected, so this run's counts
	// add to the record's.
	var base int64
	if !fresh {
		base = rec.Changed
	}
	wr.Status.StartedAt = &metav1.Time{Time: rec.StartedAt}
	msg := "running"
	if !fresh {
		msg = fmt.Sprintf("resuming (attempt %d; %d row(s) changed before)", rec.Starts, base)
	}
	r.waiting(rs, ReasonReplayRunning, msg)
	if err := r.patchStatus(ctx, rs); err != nil {
		return ctrl.Result{}, err
	}

	// Rows that die (or arrive) after the run started are not part of it: a row this
	// run re-drove that dies again is never re-driven by its resumption.
	if p.Selection.Until.IsZero() || rec.StartedAt.Before(p.Selection.Until) {
		p.Selection.Until = rec.StartedAt
	}
	logger := log.FromContext(ctx)
	interval := r.ProgressInterval
	if interval <= 0 {
		interval = DefaultReplayProgressInterval
	}
	last := time.Now()
	p.Options.Progress = func(done, total int) {
		selected, changed := base+int64(total), base
		if !p.Options.DryRun {
			changed += int64(done)
		}
		if err := replay.RecordProgress(ctx, ep.Pool, ep.Tables, rec.UID, selected, changed); err != nil {
			logger.V(1).Info("record replay progress", "error", err.Error())
		}
		if time.Since(last) < interval {
			return
		}
		last = time.Now()
		wr.Status.Selected, wr.Status.Changed = selected, changed
		wr.Status.Message = fmt.Sprintf("running: %d of %d selected row(s) handled", base+int64(done), selected)
		if err := r.patchStatus(ctx, rs); err != nil {
			logger.V(1).Info("write replay progress", "error", err.Error())
		}
	}

	report, err := replay.Run(ctx, ep, p)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return ctrl.Result{}, err
		}
		recordErr := replay.RecordError(context.WithoutCancel(ctx), ep.Pool, ep.Tables, rec.UID, err.Error())
		var cfgErr replay.ConfigError
		if errors.As(err, &cfgErr) {
			r.stalled(rs, ReasonEndpointInvalid, fmt.Sprintf("%s; nothing ran; fix the WebhookEndpoint and the replay runs", oneLine(err.Error())))
			return ctrl.Result{RequeueAfter: replayStalledPoll}, recordErr
		}
		r.waiting(rs, ReasonRunInterrupted, fmt.Sprintf("%s; the run resumes with backoff, and re-selects only rows it has not changed yet", oneLine(err.Error())))
		return ctrl.Result{}, errors.Join(err, recordErr)
	}
	selected, changed, outcomes := report.Counts()
	if !fresh {
		selected, changed = base+selected, base+changed
	}
	rec, err = replay.Finish(ctx, ep.Pool, ep.Tables, rec.UID, selected, changed, outcomes)
	if err != nil {
		r.waiting(rs, ReasonDatabaseUnreachable, oneLine(err.Error()))
		return ctrl.Result{}, err
	}
	r.finished(rs, rec, p)
	return ctrl.Result{}, nil
}

// finished copies a finished record to the status.
func (r *WebhookReplayReconciler) finished(rs *replayState, rec *replay.RunRecord, p replay.Params) {
	st := &rs.wr.Status
	st.StartedAt = &metav1.Time{Time: rec.StartedAt}
	st.CompletedAt = &metav1.Time{Time: *rec.FinishedAt}
	st.Selected, st.Changed = rec.Selected, rec.Changed
	st.Outcomes = nil
	if len(rec.Outcomes) > 0 {
		st.Outcomes = rec.Outcomes
	}
	report := replay.ReportOf(rec, p)
	msg := report.Summary()
	if rec.Starts > 1 {
		msg += fmt.Sprintf(" (in %d attempts)", rec.Starts)
	}
	if rs.transitioned(v1alpha1.ConditionSucceeded, metav1.ConditionTrue, ReasonReplaySucceeded) {
		r.event(rs.wr, corev1.EventTypeNormal, EventReplayCompleted, "Replay", "%s", msg)
	}
	rs.show(metav1.ConditionTrue, metav1.ConditionTrue, "", ReasonReplaySucceeded, msg)
}

// waiting says the replay has not run yet, or runs, and will go on by itself.
func (r *WebhookReplayReconciler) waiting(rs *replayState, reason, msg string) {
	if reason != ReasonReplayRunning && rs.transitioned(v1alpha1.ConditionReconciling, metav1.ConditionTrue, reason) {
		r.event(rs.wr, corev1.EventTypeWarning, EventReplayWaiting, "Replay", "%s", msg)
	}
	rs.show(metav1.ConditionUnknown, metav1.ConditionFalse, v1alpha1.ConditionReconciling, reason, msg)
}

// stalled says the replay cannot run until a person acts; msg says what to do.
func (r *WebhookReplayReconciler) stalled(rs *replayState, reason, msg string) {
	if rs.transitioned(v1alpha1.ConditionStalled, metav1.ConditionTrue, reason) {
		r.event(rs.wr, corev1.EventTypeWarning, EventReplayFailed, "Replay", "%s", msg)
	}
	rs.show(metav1.ConditionFalse, metav1.ConditionFalse, v1alpha1.ConditionStalled, reason, msg)
}

// show writes msg and the conditions of one of the replay's states (finished, waiting,
// stalled): Succeeded and Ready as given, active (Reconciling, Stalled, or "" for
// neither) True with reason, and the other of those two removed.
func (rs *replayState) show(succeeded, ready metav1.ConditionStatus, active, reason, msg string) {
	rs.wr.Status.Message = msg
	rs.set(v1alpha1.ConditionSucceeded, succeeded, reason, msg)
	rs.set(v1alpha1.ConditionReady, ready, reason, msg)
	for _, c := range []string{v1alpha1.ConditionReconciling, v1alpha1.ConditionStalled} {
		if c == active {
			rs.set(c, metav1.ConditionTrue, reason, msg)
		} else {
			meta.RemoveStatusCondition(&rs.wr.Status.Conditions, c)
		}
	}
}

func (rs *replayState) set(condType string, status metav1.ConditionStatus, reason, msg string) {
	if len(msg) > maxConditionMessage {
		msg = msg[:maxConditionMessage-3] + "..."
	}
	meta.SetStatusCondition(&rs.wr.Status.Conditions, metav1.Condition{
		Type: condType, Status: status, Reason: reason, Message: msg, ObservedGeneration: rs.wr.Generation,
	})
}

// transitioned reports whether condType moves to status and reason in this reconcile
// (as last written): Events fire on changes, not on every pass.
func (rs *replayState) transitioned(condType string, status metav1.ConditionStatus, reason string) bool {
	prev := meta.FindStatusCondition(rs.original.Status.Conditions, condType)
	return prev == nil || prev.Status != status || prev.Reason != reason
}

// patchStatus writes the status when it changed, and makes it the base of the next
// write (progress is written several times in one reconcile).
func (r *WebhookReplayReconciler) patchStatus(ctx context.Context, rs *replayState) error {
	rs.wr.Status.ObservedGeneration = rs.wr.Generation
	if equality.Semantic.DeepEqual(rs.original.Status, rs.wr.Status) {
		return nil
	}
	if err := r.Status().Patch(ctx, rs.wr, client.MergeFrom(rs.original)); err != nil {
		return fmt.Errorf("patch status of WebhookReplay %s/%s: %w", rs.wr.Namespace, rs.wr.Name, err)
	}
	rs.original = rs.wr.DeepCopy()
	return nil
}

func (r *WebhookReplayReconciler) event(wr *v1alpha1.WebhookReplay, eventType, reason, action, note string, args ...any) {
	if r.Recorder == nil {
		return
	}
	msg := fmt.Sprintf(note, args...)
	if len(msg) > maxEventNote {
		msg = msg[:maxEventNote-3] + "..."
	}
	r.Recorder.Eventf(wr, nil, eventType, reason, action, "%s", msg)
}

// endpointEnv reads the Secret keys the endpoint references, from the API server (the
// manager caches Secret metadata only), as `hookkeeper replay NAME` does with the
// user's credentials.
func (r *WebhookReplayReconciler) endpointEnv(ctx context.Context, we *v1alpha1.WebhookEndpoint) (func(string) string, error) {
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	secrets := map[string]*corev1.Secret{}
	lookup := func(name, key string) (string, error) {
		s, ok := secrets[name]
		if !ok {
			s = &corev1.Secret{}
			if err := reader.Get(ctx, client.ObjectKey{Namespace: we.Namespace, Name: name}, s); err != nil {
				if apierrors.IsNotFound(err) {
					return "", fmt.Errorf("Secret %s/%s not found", we.Namespace, name) //nolint:staticcheck // Secret is the kind's name
				}
				return "", fmt.Errorf("get Secret %s/%s: %w", we.Namespace, name, err)
			}
			secrets[name] = s
		}
		v, ok := s.Data[key]
		if !ok {
			return "", fmt.Errorf("Secret %s/%s key %q not found", we.Namespace, name, key) //nolint:staticcheck // Secret is the kind's name
		}
		return string(v), nil
	}
	return config.EnvFromSecrets(we, lookup, nil, time.Now())
}

// replayParams turns a defaulted spec into the run's parameters.
func replayParams(spec *v1alpha1.WebhookReplaySpec, actor string) replay.Params {
	p := replay.Params{
		Action:      spec.Action,
		DeadLetters: spec.DeadLetters,
		Receipts:    spec.Receipts != nil,
		Selection:   outbox.Selection{IDs: spec.IDs},
		Discard:     outbox.Discard{Actor: actor, Reason: spec.Reason},
		Erasure:     retention.Erasure{EntityKey: spec.EntityKey, Actor: actor, Reason: spec.Reason},
		Options:     outbox.ReplayOptions{DryRun: spec.DryRun},
	}
	if spec.Since != nil {
		p.Selection.Since = spec.Since.Time
	}
	if spec.Until != nil {
		p.Selection.Until = spec.Until.Time
	}
	if spec.Receipts != nil {
		for _, o := range spec.Receipts.Outcomes {
			p.Selection.Outcomes = append(p.Selection.Outcomes, string(o))
		}
	}
	return p
}

// replayActor is who a run is recorded as: the resource, and the field manager that
// created it when its managed fields say (a client-chosen name such as kubectl-create
// or argocd-controller, not an authenticated user: the API server does not keep the
// creator's identity on the object).
func replayActor(wr *v1alpha1.WebhookReplay) string {
	actor := fmt.Sprintf("WebhookReplay %s/%s", wr.Namespace, wr.Name)
	for _, mf := range wr.ManagedFields {
		if mf.Subresource == "" && mf.Manager != "" {
			return actor + " (created with " + mf.Manager + ")"
		}
	}
	return actor
}
