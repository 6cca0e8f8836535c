package controllers_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5/pgxpool"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/controllers"
	"github.com/hookkeeper/hookkeeper/internal/outbox"
	"github.com/hookkeeper/hookkeeper/internal/store"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// A real dispatcher, on the endpoint's real database, before a sink that answers 503:
// SinkHealthy goes False with the last error and the backlog, Ready says why, a Warning
// Event is emitted, and nothing names the sink's address or credentials. When the sink
// answers again the backlog drains, SinkHealthy goes True, Ready follows and a Normal
// Event says so.
func TestSinkHealthCondition(t *testing.T) {
	e := startEnv(t)
	g := NewWithT(t)
	ns := e.namespace(t)
	dbURL := testsupport.MigratedDatabase(t, v1alpha1.DefaultSchema)
	e.secret(t, ns, "stripe", map[string]string{"current": "whsec_current"})
	e.secret(t, ns, "db-app", map[string]string{"uri": dbURL})
	ep := validEndpoint(ns, "orders")
	cur := e.ready(t, ep)
	g.Expect(condition(cur, v1alpha1.ConditionSinkHealthy).Status).To(Equal(metav1.ConditionTrue), "%+v", cur.Status.Conditions)

	var up atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if up.Load() {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	// The sink URL carries credentials, as spec.delivery.sink.url may.
	sinkURL := strings.Replace(srv.URL, "http://", "http://fulfilment:sink-password@", 1)
	key := ns + "/orders"
	tables := store.TablesIn(v1alpha1.DefaultSchema)
	pool, err := store.Open(e.ctx, dbURL, 4)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(pool.Close)
	for i := range 3 {
		_, err := pool.Exec(e.ctx, fmt.Sprintf(`INSERT INTO %s (endpoint, dedupe_key, entity_key, event_type, source_event_id, payload)
VALUES ($1, $2, $3, 'order.paid', $2, '{}')`, tables.Outbox), key, fmt.Sprintf("evt-%d", i), fmt.Sprintf("order-%d", i))
		g.Expect(err).NotTo(HaveOccurred())
	}
	runDispatcher(t, pool, outbox.Options{
		Endpoint: key, Tables: tables, SinkURL: sinkURL, MaxAttempts: 3,
		BackoffInitial: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond, Timeout: 2 * time.Second,
		PollInterval: 50 * time.Millisecond, Logger: logr.Discard(),
	})

	g.Eventually(func(g Gomega) {
		h, err := outbox.ReadSinkHealth(e.ctx, pool, tables, key)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(h.Down).To(BeTrue())
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	e.touch(t, ep)
	cur = e.waitCondition(t, ep, v1alpha1.ConditionSinkHealthy, metav1.ConditionFalse, controllers.ReasonSinkDown)
	msg := condition(cur, v1alpha1.ConditionSinkHealthy).Message
	t.Logf("SinkHealthy=False: %s", msg)
	g.Expect(msg).To(ContainSubstring("last: sink answered 503"))
	g.Expect(msg).To(ContainSubstring("; 3 event(s) wait, the oldest for under a minute"))
	ready := condition(cur, v1alpha1.ConditionReady)
	g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(ready.Reason).To(Equal(controllers.ReasonSinkDown))
	// kstatus: it converges by itself once the sink answers.
	g.Expect(condition(cur, v1alpha1.ConditionReconciling).Status).To(Equal(metav1.ConditionTrue))
	g.Expect(meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionStalled)).To(BeNil())
	sinkHost := strings.TrimPrefix(srv.URL, "http://")
	for _, c := range cur.Status.Conditions {
		g.Expect(c.Message).NotTo(Or(ContainSubstring("sink-password"), ContainSubstring(sinkHost), ContainSubstring(dbURL)), "condition %s", c.Type)
	}
	down := e.waitEvent(t, ns, controllers.EventSinkDown)
	g.Expect(down.Type).To(Equal(corev1.EventTypeWarning))
	g.Expect(down.Note).To(ContainSubstring("sink answered 503"))
	g.Expect(down.Note).NotTo(Or(ContainSubstring("sink-password"), ContainSubstring(sinkHost)))

	up.Store(true)
	g.Eventually(func(g Gomega) {
		h, err := outbox.ReadSinkHealth(e.ctx, pool, tables, key)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(h.Down).To(BeFalse())
		g.Expect(h.Backlog.Pending).To(BeZero())
		g.Expect(h.Backlog.Dead).To(BeZero())
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	e.touch(t, ep)
	cur = e.waitCondition(t, ep, v1alpha1.ConditionSinkHealthy, metav1.ConditionTrue, controllers.ReasonSinkAnswering)
	g.Expect(condition(cur, v1alpha1.ConditionSinkHealthy).Message).To(ContainSubstring("the last outage ended at"))
	e.waitCondition(t, ep, v1alpha1.ConditionReady, metav1.ConditionTrue, controllers.ReasonReady)
	recovered := e.waitEvent(t, ns, controllers.EventSinkRecovered)
	g.Expect(recovered.Type).To(Equal(corev1.EventTypeNormal))
}

// An endpoint whose database the operator cannot reach has SinkHealthy Unknown, which
// does not hold Ready back: it says nothing about the endpoint.
func TestSinkHealthUnknownDoesNotBlockReady(t *testing.T) {
	e := startEnv(t)
	ns := e.namespaceWithSecrets(t) // the database URL names db.example, which does not resolve
	cur := e.ready(t, validEndpoint(ns, "orders"))
	c := condition(cur, v1alpha1.ConditionSinkHealthy)
	NewWithT(t).Expect(c.Status).To(Equal(metav1.ConditionUnknown), "%+v", c)
	NewWithT(t).Expect(c.Reason).To(Equal(controllers.ReasonSinkStateUnknown))
	NewWithT(t).Expect(c.Message).To(ContainSubstring("Secret db-app key \"uri\""))
}

// waitEvent waits for an Event with reason in ns and returns it.
func (e *env) waitEvent(t *testing.T, ns, reason string) eventsv1.Event {
	t.Helper()
	var found eventsv1.Event
	NewWithT(t).Eventually(func(g Gomega) {
		var list eventsv1.EventList
		g.Expect(e.k8s.List(e.ctx, &list, client.InNamespace(ns))).To(Succeed())
		ok := false
		for _, ev := range list.Items {
			if ev.Reason == reason {
				found, ok = ev, true
			}
		}
		g.Expect(ok).To(BeTrue(), "an Event with reason %s", reason)
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	return found
}

// runDispatcher runs a dispatcher until the test ends.
func runDispatcher(t *testing.T, pool *pgxpool.Pool, opts outbox.Options) {
	t.Helper()
	run := testsupport.Run(t, context.Background(), "dispatcher", timeout, outbox.NewDispatcher(pool, opts).Run)
	t.Cleanup(func() {
		if err := run.Stop(t); err != nil {
			t.Errorf("dispatcher: %v", err)
		}
	})
}
