package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/ginkgo/v2" //nolint:revive // Ginkgo's DSL reads best unqualified
	. "github.com/onsi/gomega"    //nolint:revive // gomega's matchers read best unqualified
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/demo"
	"github.com/hookkeeper/hookkeeper/internal/devcluster"
	"github.com/hookkeeper/hookkeeper/internal/pgtemp"
	"github.com/hookkeeper/hookkeeper/internal/resources"
)

// envPoolEndpoints sets how many endpoints the pool spec creates (default
// defaultPoolEndpoints).
const envPoolEndpoints = "HOOKKEEPER_E2E_POOL_ENDPOINTS"

// defaultPoolEndpoints is how many endpoints the pool spec creates in make test: the
// scale a platform team with one endpoint per provider account, environment and team
// reaches (Ready in 54 s on a quiet 2-core machine).
const defaultPoolEndpoints = 200

// One WebhookReceiverPool of two replicas serving many endpoints of the Stripe sample's
// shape, each on its own path: every endpoint accepts a signed webhook, and adding,
// changing and deleting endpoints while another takes traffic costs that one nothing.
var _ = Describe("a receiver pool", Ordered, func() {
	const (
		poolName     = "e2e-pool"
		poolDBSecret = "e2e-pool-db"
	)
	var (
		c        client.Client
		ns       string
		n        int
		names    []string
		poolDB   string
		created  time.Time
		run      = strconv.FormatInt(time.Now().UnixNano(), 36)
		endpoint = func(name string) *v1alpha1.WebhookEndpoint {
			ep := ownEndpoint(context.Background(), name)
			ep.Spec.Receiver.Replicas = nil
			ep.Spec.Receiver.PoolRef = &v1alpha1.PoolReference{Name: poolName}
			ep.Spec.Database.MaxConnections = v1alpha1.MinMaxConnections
			ep.Spec.Database.URLSecretRef = corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: poolDBSecret}, Key: "uri"}
			return ep
		}
		post = func(ctx context.Context, ep *v1alpha1.WebhookEndpoint, id string) (int, error) {
			url, err := devcluster.ReceiverURL(session.Proxy, ep)
			if err != nil {
				return 0, err
			}
			body := demo.StripeEvent(id, "payment_intent.succeeded", "pool-order-"+id, 100, time.Now())
			return demo.PostStripe(ctx, url, ownSecretsSigningKey, body)
		}
	)

	BeforeAll(func(ctx SpecContext) {
		c = session.Samples.Client
		ns = session.Samples.Namespace
		// The pool's endpoints share a database of their own on a server of their own, as a
		// platform team's would: hundreds of endpoints' sessions must not starve the
		// machine's server, which the other test packages use meanwhile. The schema starts
		// empty: one migration Job migrates it, the other endpoints wait for that one.
		srv, err := pgtemp.StartWith(ctx, pgtemp.Settings{MaxConnections: 1000})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(srv.Stop)
		poolDB = srv.URL
		Expect(demo.SeedOrders(ctx, poolDB)).To(Succeed())
		Expect(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: poolDBSecret, Namespace: ns},
			StringData: map[string]string{"uri": poolDB}})).To(Succeed())
		DeferCleanup(func(ctx SpecContext) {
			_ = c.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: poolDBSecret, Namespace: ns}})
		})
		n = defaultPoolEndpoints
		if v := os.Getenv(envPoolEndpoints); v != "" {
			var err error
			n, err = strconv.Atoi(v)
			Expect(err).NotTo(HaveOccurred(), envPoolEndpoints)
		}
		pool := &v1alpha1.WebhookReceiverPool{ObjectMeta: metav1.ObjectMeta{Name: poolName, Namespace: ns}}
		Expect(c.Create(ctx, pool)).To(Succeed())
		created = time.Now()
		for i := range n {
			name := fmt.Sprintf("pooled-%03d", i)
			names = append(names, name)
			Expect(c.Create(ctx, endpoint(name))).To(Succeed())
		}
		DeferCleanup(func(ctx SpecContext) {
			for _, name := range names {
				_ = c.Delete(ctx, &v1alpha1.WebhookEndpoint{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}})
			}
			_ = c.Delete(ctx, pool)
		})
	})

	It("makes every endpoint Ready with one Deployment of two replicas, and each accepts a signed webhook", func(ctx SpecContext) {
		Eventually(func(g Gomega) {
			var list v1alpha1.WebhookEndpointList
			g.Expect(c.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			ready := 0
			for _, ep := range list.Items {
				if ep.Spec.Receiver.PoolRef != nil && meta.IsStatusConditionTrue(ep.Status.Conditions, v1alpha1.ConditionReady) {
					ready++
				}
			}
			g.Expect(ready).To(Equal(n))
		}).WithContext(ctx).WithTimeout(10 * time.Minute).WithPolling(time.Second).Should(Succeed())
		AddReportEntry("pool", fmt.Sprintf("%d pooled endpoints Ready %.1fs after they were created", n, time.Since(created).Seconds()))

		var d appsv1.Deployment
		Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.PoolName(poolName)}, &d)).To(Succeed())
		Expect(*d.Spec.Replicas).To(Equal(int32(2)))
		var deployments appsv1.DeploymentList
		Expect(c.List(ctx, &deployments, client.InNamespace(ns))).To(Succeed())
		for _, dep := range deployments.Items {
			Expect(dep.Name).NotTo(HavePrefix("pooled-"), "a pooled endpoint has no Deployment of its own")
		}

		var mu sync.Mutex
		failures := map[string]string{}
		var wg sync.WaitGroup
		sem := make(chan struct{}, 8)
		for _, name := range names {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				// As a provider does: a 503 (say, PostgreSQL refusing more sessions while
				// hundreds of endpoints open theirs at once) is retried with the same event.
				url, err := devcluster.ReceiverURL(session.Proxy, endpoint(name))
				if err == nil {
					id := "evt_" + run + "_" + name
					body := demo.StripeEvent(id, "payment_intent.succeeded", "pool-order-"+id, 100, time.Now())
					err = deliverUntilAcknowledged(ctx, url, ownSecretsSigningKey, body)
				}
				if err != nil {
					mu.Lock()
					failures[name] = err.Error()
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		Expect(failures).To(BeEmpty())
		db, err := pgx.Connect(ctx, poolDB)
		Expect(err).NotTo(HaveOccurred())
		defer func() { _ = db.Close(context.Background()) }()
		var jobs batchv1.JobList
		Expect(c.List(ctx, &jobs, client.InNamespace(ns), client.HasLabels{resources.LabelMigrationTarget})).To(Succeed())
		migrations := 0
		for _, job := range jobs.Items {
			if strings.HasPrefix(job.Name, "pooled-") {
				migrations++
			}
		}
		AddReportEntry("pool", fmt.Sprintf("migration Jobs for %d endpoints on one new schema: %d", n, migrations))
		var receipts int
		Expect(db.QueryRow(ctx, `SELECT count(DISTINCT endpoint) FROM hookkeeper.webhook_events WHERE event_id LIKE $1`,
			"evt_"+run+"_pooled-%").Scan(&receipts)).To(Succeed())
		Expect(receipts).To(Equal(n), "one receipt per endpoint, recorded under its own key")
	})

	It("adds, changes and deletes endpoints under traffic without failing another", func(ctx SpecContext) {
		busy := endpoint(names[0])
		var sent, failed atomic.Int64
		var lastFailure atomic.Value
		trafficCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			paced(trafficCtx.Done(), 20*time.Millisecond, func(i int) bool {
				code, err := post(trafficCtx, busy, fmt.Sprintf("evt_%s_busy_%d", run, i))
				if trafficCtx.Err() != nil {
					return false
				}
				sent.Add(1)
				if err != nil || code != http.StatusOK {
					failed.Add(1)
					lastFailure.Store(fmt.Sprintf("%d %v", code, err))
				}
				return true
			})
		}()
		within := func(what string, f func(g Gomega)) {
			begin := time.Now()
			Eventually(f).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(100 * time.Millisecond).Should(Succeed())
			AddReportEntry("pool", fmt.Sprintf("%s: %.1fs", what, time.Since(begin).Seconds()))
		}

		added := endpoint("pooled-added")
		names = append(names, added.Name)
		Expect(c.Create(ctx, added)).To(Succeed())
		within("an added endpoint accepts webhooks after", func(g Gomega) {
			code, err := post(ctx, added, "evt_"+run+"_added")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(code).To(Equal(http.StatusOK))
		})

		changed := endpoint(names[1])
		oldPath := changed.DeepCopy()
		// A merge patch of the path alone: the operator writes the status meanwhile.
		patch := client.MergeFrom(changed.DeepCopy())
		changed.Spec.Receiver.Path = "/v2"
		Expect(c.Patch(ctx, changed, patch)).To(Succeed())
		within("a changed endpoint (new path) switches after", func(g Gomega) {
			code, err := post(ctx, changed, "evt_"+run+"_changed")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(code).To(Equal(http.StatusOK))
			code, err = post(ctx, oldPath, "evt_"+run+"_old_path")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(code).To(Equal(http.StatusNotFound))
		})

		deleted := endpoint(names[2])
		Expect(c.Delete(ctx, deleted)).To(Succeed())
		within("a deleted endpoint stops being served after", func(g Gomega) {
			code, err := post(ctx, deleted, "evt_"+run+"_deleted")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(code).To(Equal(http.StatusNotFound))
		})

		stop()
		<-done
		AddReportEntry("pool", fmt.Sprintf("traffic to %s meanwhile: %d webhooks, %d not 200", busy.Name, sent.Load(), failed.Load()))
		Expect(sent.Load()).To(BeNumerically(">", 10))
		Expect(failed.Load()).To(BeZero(), "the other endpoint's traffic: last failure %v", lastFailure.Load())
	})

	It("moves an endpoint to receivers of its own and back under traffic, losing and repeating nothing", func(ctx SpecContext) {
		mover := endpoint(names[3])
		db, err := pgx.Connect(ctx, poolDB)
		Expect(err).NotTo(HaveOccurred())
		defer func() { _ = db.Close(context.Background()) }()
		// Each event captures an order of its own, so each leaves a receipt and an outbox
		// row, delivered by whichever receivers serve the endpoint then. The sender is a
		// provider whose URL follows the endpoint's status: it retries each event until it
		// is acknowledged.
		var sent atomic.Int64
		trafficCtx, stop := context.WithCancel(ctx)
		errs := make(chan error, 1)
		go func() {
			defer close(errs)
			for i := 0; trafficCtx.Err() == nil; i++ {
				id := fmt.Sprintf("evt_%s_move_%d", run, i)
				order := "move-order-" + id
				// Under the spec's context, not trafficCtx: pgx closes a connection whose
				// query is cancelled, and the checks below still need db after stop().
				if _, err := db.Exec(ctx, `INSERT INTO public.orders (tenant_id, client_txn_id, status, expected_amount_paise)
VALUES ('acme', $1, 'payment_pending', 100)`, order); err != nil {
					errs <- err
					return
				}
				body := demo.StripeEvent(id, "payment_intent.succeeded", order, 100, time.Now())
				err := deliverFollowing(trafficCtx, c, mover, body)
				if trafficCtx.Err() != nil {
					return
				}
				if err != nil {
					errs <- fmt.Errorf("event %s: %w", id, err)
					return
				}
				sent.Add(1)
				select {
				case <-trafficCtx.Done():
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
		served := func(pooled bool) func(g Gomega) {
			return func(g Gomega) {
				cur := &v1alpha1.WebhookEndpoint{}
				g.Expect(c.Get(ctx, client.ObjectKeyFromObject(mover), cur)).To(Succeed())
				g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
				g.Expect(meta.IsStatusConditionTrue(cur.Status.Conditions, v1alpha1.ConditionReady)).To(BeTrue())
				g.Expect(cur.Spec.Receiver.PoolRef != nil).To(Equal(pooled))
				before := sent.Load()
				g.Eventually(sent.Load).WithTimeout(10 * time.Second).Should(BeNumerically(">", before+5))
			}
		}
		move := func(what string, poolRef *v1alpha1.PoolReference) {
			cur := &v1alpha1.WebhookEndpoint{}
			Expect(c.Get(ctx, client.ObjectKeyFromObject(mover), cur)).To(Succeed())
			patch := client.MergeFrom(cur.DeepCopy())
			cur.Spec.Receiver.PoolRef = poolRef
			if poolRef == nil {
				cur.Spec.Receiver.Replicas = ptr.To[int32](1)
			} else {
				cur.Spec.Receiver.Replicas = nil
			}
			Expect(c.Patch(ctx, cur, patch)).To(Succeed())
			begin := time.Now()
			Eventually(served(poolRef != nil)).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
			AddReportEntry("pool", fmt.Sprintf("%s: Ready and taking webhooks after %.1fs", what, time.Since(begin).Seconds()))
		}
		Eventually(served(true)).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
		move("moved from the pool to receivers of its own", nil)
		move("moved back into the pool", &v1alpha1.PoolReference{Name: poolName})
		stop()
		Expect(<-errs).To(Succeed())
		n := sent.Load()

		key := ns + "/" + mover.Name
		Eventually(func(g Gomega) {
			var receipts, distinct, outbox, delivered, paid int64
			g.Expect(db.QueryRow(ctx, `SELECT count(*), count(DISTINCT event_id) FROM hookkeeper.webhook_events WHERE endpoint = $1 AND event_id LIKE $2`,
				key, "evt_"+run+"_move_%").Scan(&receipts, &distinct)).To(Succeed())
			g.Expect(db.QueryRow(ctx, `SELECT count(*), count(delivered_at) FROM hookkeeper.outbox WHERE endpoint = $1 AND entity_key LIKE 'move-order-%'`,
				key).Scan(&outbox, &delivered)).To(Succeed())
			g.Expect(db.QueryRow(ctx, `SELECT count(*) FROM public.orders WHERE client_txn_id LIKE $1 AND status = 'paid'`,
				"move-order-evt_"+run+"_move_%").Scan(&paid)).To(Succeed())
			// An event sent when the sender stopped may be recorded without its answer
			// having reached the sender: at most one more than acknowledged.
			g.Expect(receipts).To(Equal(distinct), "one receipt per event")
			g.Expect(receipts).To(BeNumerically("~", n, 1))
			g.Expect(outbox).To(Equal(receipts), "one outbox row per captured order")
			g.Expect(paid).To(Equal(receipts))
			g.Expect(delivered).To(Equal(outbox), "every outbox row delivered by the receivers serving the endpoint")
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
		AddReportEntry("pool", fmt.Sprintf("moving out of the pool and back: %d webhooks acknowledged, each recorded, captured and delivered once", n))
	})
})

// deliverFollowing sends body to ep as a provider would whose configured URL follows
// the endpoint (pooled or dedicated): each attempt posts to the URL the endpoint's
// current spec gives, until one is acknowledged.
func deliverFollowing(ctx context.Context, c client.Client, ep *v1alpha1.WebhookEndpoint, body []byte) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		cur := &v1alpha1.WebhookEndpoint{}
		err := c.Get(ctx, client.ObjectKeyFromObject(ep), cur)
		code := 0
		if err == nil {
			var url string
			if url, err = devcluster.ReceiverURL(session.Proxy, cur); err == nil {
				code, err = demo.PostStripe(ctx, url, ownSecretsSigningKey, body)
			}
		}
		if err == nil && code >= 200 && code < 300 {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("not acknowledged within 2m: %w", err)
			}
			return fmt.Errorf("not acknowledged within 2m (last status %d)", code)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
