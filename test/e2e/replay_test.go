package e2e

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/ginkgo/v2" //nolint:revive // Ginkgo's DSL reads best unqualified
	. "github.com/onsi/gomega"    //nolint:revive // gomega's matchers read best unqualified
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// A WebhookReplay on the local cluster: the operator re-drives the Stripe sample's
// dead letters once, the receivers' dispatchers deliver them, the status counts them,
// and an operator restart does not run it again.
var _ = Describe("a WebhookReplay", Ordered, func() {
	var (
		db  *pgx.Conn
		ep  *v1alpha1.WebhookEndpoint
		key string
		ids []int64
		run = strconv.FormatInt(time.Now().UnixNano(), 36)
	)

	BeforeAll(func(ctx SpecContext) {
		var err error
		db, err = session.DB(ctx)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { _ = db.Close(context.Background()) })
		// An endpoint of its own, with receivers (whose dispatchers deliver what the
		// replay re-drives): the sample's specs delete the sample's endpoint.
		ep = createOwnEndpoint(ctx, "replay-e2e", 3*time.Minute)
		key = session.Samples.Namespace + "/" + ep.Name
		for i := range 3 {
			var id int64
			Expect(db.QueryRow(ctx, `INSERT INTO hookkeeper.outbox
  (endpoint, dedupe_key, entity_key, event_type, source_event_id, payload, dead_at, attempts, last_error)
VALUES ($1, $2, 'order-1003', 'order.paid', $2, '{}', now(), 12, 'sink answered 500')
RETURNING id`, key, fmt.Sprintf("replay_%s_%d", run, i)).Scan(&id)).To(Succeed())
			ids = append(ids, id)
		}
	})

	It("re-drives dead letters once, reports counts, and is not run again after an operator restart", func(ctx SpecContext) {
		c := session.Samples.Client
		replay := &v1alpha1.WebhookReplay{
			ObjectMeta: metav1.ObjectMeta{Name: "redrive-" + run, Namespace: session.Samples.Namespace},
			Spec: v1alpha1.WebhookReplaySpec{
				EndpointRef: v1alpha1.EndpointReference{Name: ep.Name},
				DeadLetters: true, IDs: ids,
			},
		}
		Expect(c.Create(ctx, replay)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { _ = c.Delete(ctx, replay) })

		done := func(g Gomega) *v1alpha1.WebhookReplay {
			cur := &v1alpha1.WebhookReplay{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(replay), cur)).To(Succeed())
			g.Expect(meta.IsStatusConditionTrue(cur.Status.Conditions, v1alpha1.ConditionSucceeded)).To(BeTrue(), "%+v", cur.Status)
			return cur
		}
		var cur *v1alpha1.WebhookReplay
		Eventually(func(g Gomega) { cur = done(g) }).WithContext(ctx).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
		Expect(cur.Status.Selected).To(Equal(int64(3)))
		Expect(cur.Status.Changed).To(Equal(int64(3)))
		Expect(meta.IsStatusConditionTrue(cur.Status.Conditions, v1alpha1.ConditionReady)).To(BeTrue())

		// The receivers' dispatchers deliver the re-driven rows to the sink.
		Eventually(func(g Gomega) {
			got := map[string]bool{}
			for _, d := range session.Sink.Deliveries() {
				got[d.IdempotencyKey] = true
			}
			for i := range 3 {
				g.Expect(got).To(HaveKey(fmt.Sprintf("replay_%s_%d", run, i)))
			}
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())

		// One of them dies again; after an operator restart the replay is not run again.
		_, err := db.Exec(ctx, `UPDATE hookkeeper.outbox SET dead_at = now(), delivered_at = NULL, attempts = 12 WHERE id = $1`, ids[0])
		Expect(err).NotTo(HaveOccurred())
		Expect(session.RestartOperator(ctx)).To(Succeed())
		// The restarted operator has reconciled the replay once it writes its status
		// again; the run record says it started once.
		Consistently(func(g Gomega) {
			var deadAt *time.Time
			g.Expect(db.QueryRow(ctx, `SELECT dead_at FROM hookkeeper.outbox WHERE id = $1`, ids[0]).Scan(&deadAt)).To(Succeed())
			g.Expect(deadAt).NotTo(BeNil(), "the re-dead row was re-driven a second time")
			var starts int
			g.Expect(db.QueryRow(ctx, `SELECT starts FROM hookkeeper.replay_runs WHERE uid = $1`, string(cur.UID)).Scan(&starts)).To(Succeed())
			g.Expect(starts).To(Equal(1))
			g.Expect(done(g).Status.Changed).To(Equal(int64(3)))
		}).WithContext(ctx).WithTimeout(10 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())
	})
})
