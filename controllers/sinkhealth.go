package controllers

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/outbox"
	"github.com/hookkeeper/hookkeeper/internal/store"
)

// How often the sink's state is read again: while the sink is down, its state is
// unknown or a backlog exists, and otherwise. Together with the dispatchers' own
// threshold (outbox.DefaultSinkDownAfter unavailable answers) this bounds how late
// SinkHealthy changes.
const (
	sinkHealthPoll     = 30 * time.Second
	sinkHealthIdlePoll = 2 * time.Minute
)

// reconcileSinkHealth reads what the endpoint's dispatchers know of the sink and report
// it as SinkHealthy. Receiver pods hold no Kubernetes credentials, so the dispatchers
// keep the state in the endpoint's schema (sink_state, see internal/outbox/sink.go) and
// the operator reads it with the endpoint's database URL, which it already reads to
// hash. It never stops the reconcile: the sink says nothing about the objects.
func (r *WebhookEndpointReconciler) reconcileSinkHealth(ctx context.Context, st *state) error {
	ep := st.ep
	ref := ep.Spec.Database.URLSecretRef
	url := string(st.values[ref.Name+"/"+ref.Key])
	h, err := readSinkHealth(ctx, &st.db, url, ep.Spec.Database.Schema, ep.Namespace+"/"+ep.Name)
	switch {
	case err != nil:
		st.requeue(st.now.Add(sinkHealthPoll))
		st.setCondition(v1alpha1.ConditionSinkHealthy, metav1.ConditionUnknown, ReasonSinkStateUnknown,
			fmt.Sprintf("cannot read the sink state the dispatchers keep in schema %q: %s; the operator reads it with the URL of Secret %s key %q, so its pods must reach the database",
				ep.Spec.Database.Schema, oneLine(err.Error()), ref.Name, ref.Key))
	case h.Down:
		st.requeue(st.now.Add(sinkHealthPoll))
		msg := sinkDownMessage(h)
		if st.transitioned(v1alpha1.ConditionSinkHealthy, metav1.ConditionFalse, ReasonSinkDown) {
			r.event(ep, corev1.EventTypeWarning, EventSinkDown, "Deliver", "%s", msg)
		}
		st.setCondition(v1alpha1.ConditionSinkHealthy, metav1.ConditionFalse, ReasonSinkDown, msg)
	default:
		poll := sinkHealthIdlePoll
		if h.Backlog.Pending > 0 {
			poll = sinkHealthPoll
		}
		st.requeue(st.now.Add(poll))
		msg := "the sink answers the dispatchers"
		if h.RecoveredAt != nil {
			msg += fmt.Sprintf("; the last outage ended at %s", h.RecoveredAt.UTC().Format(time.RFC3339))
		}
		if prev := st.previous(v1alpha1.ConditionSinkHealthy); prev != nil && prev.Reason == ReasonSinkDown &&
			st.transitioned(v1alpha1.ConditionSinkHealthy, metav1.ConditionTrue, ReasonSinkAnswering) {
			r.event(ep, corev1.EventTypeNormal, EventSinkRecovered, "Deliver", "%s; delivery resumed, %d event(s) waiting", msg, h.Backlog.Pending)
		}
		st.setCondition(v1alpha1.ConditionSinkHealthy, metav1.ConditionTrue, ReasonSinkAnswering, msg)
	}
	return nil
}

// readSinkHealth reads the endpoint's sink state through db.
func readSinkHealth(ctx context.Context, db *endpointDB, url, schema, endpoint string) (h outbox.SinkHealth, err error) {
	err = db.read(ctx, url, func(ctx context.Context, conn *pgx.Conn) error {
		h, err = outbox.ReadSinkHealth(ctx, conn, store.TablesIn(schema), endpoint)
		return err
	})
	return h, err
}

// sinkDownMessage says since when the sink fails, how, what waits and what happens
// next. Ages are in whole minutes and the next probe's time is left out, so the status
// changes with the backlog and the failures, not with every read.
func sinkDownMessage(h outbox.SinkHealth) string {
	var b strings.Builder
	since := h.DownSince
	if h.FailingSince != nil {
		since = h.FailingSince
	}
	fmt.Fprintf(&b, "the sink has not answered since %s (%d consecutive failed attempts, last: %s)",
		since.UTC().Format(time.RFC3339), h.ConsecutiveFailures, h.LastError)
	fmt.Fprintf(&b, "; %d event(s) wait", h.Backlog.Pending)
	if h.Backlog.Pending > 0 {
		fmt.Fprintf(&b, ", the oldest for %s", roundAge(h.Backlog.OldestPendingAge))
	}
	fmt.Fprintf(&b, "; the dispatchers send one probe at a time, at most %s apart, count no attempts and dead-letter nothing; delivery resumes when the sink answers",
		outbox.DefaultProbeIntervalMax)
	return b.String()
}

// roundAge is d in whole minutes, "under a minute" below one.
func roundAge(d time.Duration) string {
	if d < time.Minute {
		return "under a minute"
	}
	return strings.TrimSuffix(d.Truncate(time.Minute).String(), "0s")
}
