package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/ginkgo/v2" //nolint:revive // Ginkgo's DSL reads best unqualified
	. "github.com/onsi/gomega"    //nolint:revive // gomega's matchers read best unqualified
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/demo"
	"github.com/hookkeeper/hookkeeper/internal/resources"
)

// The Stripe orders sample, as applied by the session.
var _ = Describe("the Stripe orders sample", Ordered, func() {
	var (
		ep          *v1alpha1.WebhookEndpoint
		url         string
		secret      string
		endpointKey string
		db          *pgx.Conn
		run         string // makes event ids unique per suite run
	)

	BeforeAll(func(ctx SpecContext) {
		Expect(session.Samples.Endpoints).To(HaveLen(1))
		ep = session.Samples.Endpoints[0]
		endpointKey = session.Samples.Namespace + "/" + ep.Name
		var err error
		url, err = session.Samples.ReceiverURL(session.Proxy, ep)
		Expect(err).NotTo(HaveOccurred())
		secret = session.Samples.SigningSecrets[ep.Name]
		Expect(secret).NotTo(BeEmpty())
		db, err = session.DB(ctx)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { _ = db.Close(context.Background()) })
		run = strconv.FormatInt(time.Now().UnixNano(), 36)
	})

	receipts := func(ctx context.Context, eventID string) (int, string) {
		var n int
		var outcome string
		Expect(db.QueryRow(ctx, `SELECT count(*), coalesce(min(outcome), '') FROM hookkeeper.webhook_events
			WHERE endpoint = $1 AND event_id = $2`, endpointKey, eventID).Scan(&n, &outcome)).To(Succeed())
		return n, outcome
	}
	orderState := func(ctx context.Context, order string) string {
		var state string
		Expect(db.QueryRow(ctx, `SELECT status FROM public.orders WHERE tenant_id = 'acme' AND client_txn_id = $1`,
			order).Scan(&state)).To(Succeed())
		return state
	}

	It("applies a signed payment once, however often and concurrently it is delivered", func(ctx SpecContext) {
		id := "evt_" + run + "_pay"
		body := demo.StripeEvent(id, "payment_intent.succeeded", "order-1001", demo.SampleOrders["order-1001"], time.Now())
		Expect(demo.PostStripe(ctx, url, secret, body)).To(Equal(http.StatusOK))

		var wg sync.WaitGroup
		codes := make(chan int, 16)
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer GinkgoRecover()
				code, err := demo.PostStripe(ctx, url, secret, body)
				Expect(err).NotTo(HaveOccurred())
				codes <- code
			}()
		}
		wg.Wait()
		close(codes)
		for code := range codes {
			Expect(code).To(Equal(http.StatusOK), "a duplicate of an authentic event is acknowledged")
		}

		n, outcome := receipts(ctx, id)
		Expect(n).To(Equal(1))
		Expect(outcome).To(Equal("applied"))
		Expect(orderState(ctx, "order-1001")).To(Equal("paid"))
		var rows int
		var key string
		Expect(db.QueryRow(ctx, `SELECT count(*), min(dedupe_key) FROM hookkeeper.outbox
			WHERE endpoint = $1 AND source_event_id = $2`, endpointKey, id).Scan(&rows, &key)).To(Succeed())
		Expect(rows).To(Equal(1))

		// The dispatcher in the receiver pods delivers it to the sink, with the
		// outbox row's dedupe key as Idempotency-Key.
		Eventually(func() []string {
			var keys []string
			for _, d := range session.Sink.Deliveries() {
				keys = append(keys, d.IdempotencyKey)
			}
			return keys
		}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(ContainElement(key))
	})

	It("rejects a forged signature and stores nothing", func(ctx SpecContext) {
		id := "evt_" + run + "_forged"
		body := demo.StripeEvent(id, "payment_intent.succeeded", "order-1004", demo.SampleOrders["order-1004"], time.Now())
		Expect(demo.PostStripe(ctx, url, "whsec_forged", body)).To(Equal(http.StatusUnauthorized))
		n, _ := receipts(ctx, id)
		Expect(n).To(BeZero())
		Expect(orderState(ctx, "order-1004")).To(Equal("payment_pending"))
	})

	It("rolls the receivers when the signing Secret rotates", func(ctx SpecContext) {
		ns := session.Samples.Namespace
		name := resources.ReceiverName(ep)
		oldHash := receiverDeployment(ctx, ep).Spec.Template.Annotations[resources.AnnotationConfigHash]
		Expect(oldHash).NotTo(BeEmpty())

		ref := ep.Spec.SigningSecrets[0].SecretKeyRef
		rotated := "whsec_rotated_" + run
		updateSecret(ctx, ns, ref.Name, func(data map[string][]byte) { data[ref.Key] = []byte(rotated) })

		// The operator changes the pod template's hash; the Deployment controller
		// rolls the pods (maxUnavailable 0), the node agent runs the new ones.
		awaitRollout(ctx, ns, name, oldHash)
		session.Samples.SigningSecrets[ep.Name] = rotated

		id := "evt_" + run + "_after_rotation"
		body := demo.StripeEvent(id, "payment_intent.succeeded", "order-1002", demo.SampleOrders["order-1002"], time.Now())
		Expect(demo.PostStripe(ctx, url, secret, body)).To(Equal(http.StatusUnauthorized), "the old secret no longer verifies")
		Expect(demo.PostStripe(ctx, url, rotated, body)).To(Equal(http.StatusOK))
		secret = rotated
		n, outcome := receipts(ctx, id)
		Expect(n).To(Equal(1))
		Expect(outcome).To(Equal("applied"))
		Expect(orderState(ctx, "order-1002")).To(Equal("paid"))
	})

	It("loses nothing when a receiver process is killed", func(ctx SpecContext) {
		ns := session.Samples.Namespace
		d := receiverDeployment(ctx, ep)
		pods := receiverPods(ctx, Default, d)
		Expect(pods).NotTo(BeEmpty())
		victim := pods[0]
		pid, err := strconv.Atoi(strings.TrimPrefix(victim.Status.ContainerStatuses[0].ContainerID, "hookkeeper-dev://"))
		Expect(err).NotTo(HaveOccurred())
		restarts := victim.Status.ContainerStatuses[0].RestartCount

		// Events sent while one receiver dies; a provider retries what was not
		// acknowledged, and so does this sender.
		const events = 40
		var wg sync.WaitGroup
		errs := make(chan error, events)
		for i := range events {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprintf("evt_%s_kill_%02d", run, i)
				body := demo.StripeEvent(id, "payment_intent.created", "order-1003", 1, time.Now())
				errs <- deliverUntilAcknowledged(ctx, url, secret, body)
			}()
			if i == events/4 {
				Expect(syscall.Kill(pid, syscall.SIGKILL)).To(Succeed())
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			Expect(err).NotTo(HaveOccurred())
		}

		var stored, distinct int
		Expect(db.QueryRow(ctx, `SELECT count(*), count(DISTINCT event_id) FROM hookkeeper.webhook_events
			WHERE endpoint = $1 AND event_id LIKE $2`, endpointKey, "evt_"+run+"_kill_%").Scan(&stored, &distinct)).To(Succeed())
		Expect(stored).To(Equal(events), "every acknowledged event is stored exactly once")
		Expect(distinct).To(Equal(events))

		// The node agent restarts the killed process (restartPolicy Always) and reports
		// the kill in the container's last state.
		Eventually(func(g Gomega) {
			p, err := clientset.CoreV1().Pods(ns).Get(ctx, victim.Name, metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			cs := p.Status.ContainerStatuses[0]
			g.Expect(cs.RestartCount).To(BeNumerically(">", restarts))
			g.Expect(cs.LastTerminationState.Terminated).NotTo(BeNil())
			g.Expect(cs.LastTerminationState.Terminated.ExitCode).To(Equal(int32(128 + int(syscall.SIGKILL))))
			g.Expect(cs.Ready).To(BeTrue())
		}).WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
	})

	It("parks a refund that arrives before its capture and applies it when the capture does", func(ctx SpecContext) {
		order := "order-" + run + "-ooo"
		const amount = int64(75000)
		_, err := db.Exec(ctx, `INSERT INTO public.orders (tenant_id, client_txn_id, status, expected_amount_paise)
			VALUES ('acme', $1, 'payment_pending', $2)`, order, amount)
		Expect(err).NotTo(HaveOccurred())

		// The provider's order of events: capture, then refund. The network delivers the
		// refund first.
		now := time.Now()
		captureID := "evt_" + run + "_ooo_capture"
		refundID := "evt_" + run + "_ooo_refund"
		capture := demo.StripeEvent(captureID, "payment_intent.succeeded", order, amount, now.Add(-time.Minute))
		refund := demo.StripeEvent(refundID, "charge.refunded", order, amount, now.Add(-30*time.Second))

		Expect(demo.PostStripe(ctx, url, secret, refund)).To(Equal(http.StatusOK), "an early event is acknowledged")
		n, outcome := receipts(ctx, refundID)
		Expect(n).To(Equal(1))
		Expect(outcome).To(Equal("parked"), "the refund waits for a paid order")
		Expect(orderState(ctx, order)).To(Equal("payment_pending"))

		// The capture applies and releases the refund in the same transaction.
		Expect(demo.PostStripe(ctx, url, secret, capture)).To(Equal(http.StatusOK))
		n, outcome = receipts(ctx, captureID)
		Expect(n).To(Equal(1))
		Expect(outcome).To(Equal("applied"))
		_, outcome = receipts(ctx, refundID)
		Expect(outcome).To(Equal("applied"))
		Expect(orderState(ctx, order)).To(Equal("refunded"))

		// The provider retries the refund under the same event id: a duplicate.
		Expect(demo.PostStripe(ctx, url, secret, refund)).To(Equal(http.StatusOK))
		n, _ = receipts(ctx, refundID)
		Expect(n).To(Equal(1))
		Expect(orderState(ctx, order)).To(Equal("refunded"))

		var types []string
		Expect(db.QueryRow(ctx, `SELECT coalesce(array_agg(event_type ORDER BY id), '{}') FROM hookkeeper.outbox
			WHERE endpoint = $1 AND entity_key = $2`, endpointKey, order).Scan(&types)).To(Succeed())
		Expect(types).To(Equal([]string{"order.paid", "order.refunded"}), "both effects, in provider order")
	})

	It("keeps accepting signed traffic while the signing secret rotates", func(ctx SpecContext) {
		ns := session.Samples.Namespace
		name := resources.ReceiverName(ep)
		hash := receiverDeployment(ctx, ep).Spec.Template.Annotations[resources.AnnotationConfigHash]
		oldRef := ep.Spec.SigningSecrets[0].SecretKeyRef
		const nextKey = "next"
		next := "whsec_next_" + run

		// A provider sending fresh events all along, retrying what is not acknowledged.
		var signing atomic.Pointer[string]
		signing.Store(&secret)
		currentKey := func() string { return *signing.Load() }
		type result struct {
			id  string
			err error
		}
		results := make(chan result, 1<<14)
		stop := make(chan struct{})
		var acknowledged atomic.Int64
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// A provider's steady event rate (50/s per sender), so a slow rollout
				// cannot outgrow the results buffer.
				paced(stop, 20*time.Millisecond, func(i int) bool {
					id := fmt.Sprintf("evt_%s_rot_%d_%05d", run, w, i)
					body := demo.StripeEvent(id, "payment_intent.created", "order-1003", 1, time.Now())
					err := deliverWith(ctx, url, currentKey, body, time.Minute)
					if err == nil {
						acknowledged.Add(1)
					}
					r := result{id: id, err: err}
					select {
					case results <- r:
						return true
					case <-stop:
						// Keep the result when there is room (it may be an acknowledged
						// event); never block a stopping sender on a full buffer.
						select {
						case results <- r:
						default:
						}
						return false
					}
				})
			}()
		}
		stopSenders := func() {
			select {
			case <-stop:
			default:
				close(stop)
			}
			wg.Wait()
		}
		DeferCleanup(stopSenders)
		atLeast := func(n int64) {
			Eventually(acknowledged.Load).WithTimeout(time.Minute).WithPolling(50 * time.Millisecond).
				Should(BeNumerically(">=", n))
		}
		atLeast(20)

		// Add the new key next to the old one, and the endpoint verifies with both.
		updateSecret(ctx, ns, oldRef.Name, func(data map[string][]byte) { data[nextKey] = []byte(next) })
		ep = updateEndpoint(ctx, ep, func(e *v1alpha1.WebhookEndpoint) {
			e.Spec.SigningSecrets = append(e.Spec.SigningSecrets, v1alpha1.SigningSecret{
				SecretKeyRef: corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: oldRef.Name}, Key: nextKey},
			})
		})
		hash = awaitRollout(ctx, ns, name, hash)

		// The provider signs with the new key; every pod accepts it now.
		signing.Store(&next)
		mark := acknowledged.Load()
		atLeast(mark + 20)

		// Drop the old key from the endpoint, then from the Secret.
		ep = updateEndpoint(ctx, ep, func(e *v1alpha1.WebhookEndpoint) {
			e.Spec.SigningSecrets = slices.DeleteFunc(e.Spec.SigningSecrets, func(s v1alpha1.SigningSecret) bool {
				return s.SecretKeyRef.Key == oldRef.Key
			})
		})
		awaitRollout(ctx, ns, name, hash)
		updateSecret(ctx, ns, oldRef.Name, func(data map[string][]byte) { delete(data, oldRef.Key) })
		mark = acknowledged.Load()
		atLeast(mark + 20)
		stopSenders()
		close(results)

		var ids []string
		for r := range results {
			Expect(r.err).NotTo(HaveOccurred(), "event %s was given up on", r.id)
			ids = append(ids, r.id)
		}
		GinkgoWriter.Printf("rotation under traffic: %d events acknowledged\n", len(ids))

		var stored []string
		Expect(db.QueryRow(ctx, `SELECT coalesce(array_agg(event_id), '{}') FROM hookkeeper.webhook_events
			WHERE endpoint = $1 AND starts_with(event_id, $2)`, endpointKey, "evt_"+run+"_rot_").Scan(&stored)).To(Succeed())
		Expect(stored).To(ConsistOf(ids), "every acknowledged event is stored exactly once")

		old := secret
		secret = next
		session.Samples.SigningSecrets[ep.Name] = next
		probe := demo.StripeEvent("evt_"+run+"_rot_probe", "payment_intent.created", "order-1003", 1, time.Now())
		Expect(demo.PostStripe(ctx, url, old, probe)).To(Equal(http.StatusUnauthorized), "the old key no longer verifies")
		Expect(demo.PostStripe(ctx, url, next, probe)).To(Equal(http.StatusOK))
	})

	It("delivers each effect to the sink under one Idempotency-Key", func(ctx SpecContext) {
		prefix := "evt_" + run + "_"
		var applied int
		Expect(db.QueryRow(ctx, `SELECT count(*) FROM hookkeeper.webhook_events
			WHERE endpoint = $1 AND starts_with(event_id, $2) AND outcome = 'applied'`, endpointKey, prefix).Scan(&applied)).To(Succeed())
		Expect(applied).To(BeNumerically(">=", 4), "the specs above applied transitions")

		rows, err := db.Query(ctx, `SELECT dedupe_key, source_event_id FROM hookkeeper.outbox
			WHERE endpoint = $1 AND starts_with(source_event_id, $2)`, endpointKey, prefix)
		Expect(err).NotTo(HaveOccurred())
		keyOf := map[string]string{} // source event id -> dedupe key
		for rows.Next() {
			var key, source string
			Expect(rows.Scan(&key, &source)).To(Succeed())
			Expect(keyOf).NotTo(HaveKey(source), "one effect per applied event")
			keyOf[source] = key
		}
		Expect(rows.Err()).NotTo(HaveOccurred())
		Expect(keyOf).To(HaveLen(applied), "every applied transition of the sample emits one effect")

		Eventually(func(g Gomega) {
			var pending int
			g.Expect(db.QueryRow(ctx, `SELECT count(*) FROM hookkeeper.outbox WHERE endpoint = $1
				AND starts_with(source_event_id, $2) AND delivered_at IS NULL`, endpointKey, prefix).Scan(&pending)).To(Succeed())
			g.Expect(pending).To(BeZero())
		}).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())

		keysBySource := map[string]map[string]bool{}
		for _, d := range session.Sink.Deliveries() {
			var env struct {
				ID            string `json:"id"`
				SourceEventID string `json:"sourceEventId"`
			}
			Expect(json.Unmarshal(d.Body, &env)).To(Succeed())
			if !strings.HasPrefix(env.SourceEventID, prefix) {
				continue
			}
			Expect(d.IdempotencyKey).To(Equal(env.ID), "the header names the body's effect")
			if keysBySource[env.SourceEventID] == nil {
				keysBySource[env.SourceEventID] = map[string]bool{}
			}
			keysBySource[env.SourceEventID][d.IdempotencyKey] = true
		}
		Expect(keysBySource).To(HaveLen(len(keyOf)), "the sink got every effect")
		for source, keys := range keysBySource {
			Expect(keys).To(HaveLen(1), "repeats of %s carry the same key", source)
			Expect(keys).To(HaveKey(keyOf[source]))
		}
	})

	// Last: it deletes the endpoint the specs above use.
	It("garbage-collects what it made when the WebhookEndpoint is deleted", func(ctx SpecContext) {
		ns := session.Samples.Namespace
		current := &v1alpha1.WebhookEndpoint{}
		Expect(session.Samples.Client.Get(ctx, client.ObjectKeyFromObject(ep), current)).To(Succeed())
		owned := ownedObjects(ctx, Default, ns, current.UID)
		kinds := map[string]bool{}
		for _, o := range owned {
			kinds[o.kind] = true
		}
		Expect(kinds).To(HaveKey("Deployment"))
		Expect(kinds).To(HaveKey("Service"))
		Expect(kinds).To(HaveKey("Job"))
		Expect(kinds).To(HaveKey("Pod"))
		GinkgoWriter.Printf("owned before deletion: %v\n", owned)

		Expect(session.Samples.Client.Delete(ctx, current)).To(Succeed())
		Eventually(func(g Gomega) {
			err := session.Samples.Client.Get(ctx, client.ObjectKeyFromObject(ep), &v1alpha1.WebhookEndpoint{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "endpoint still there: %v", err)
			g.Expect(ownedObjects(ctx, g, ns, current.UID)).To(BeEmpty())
		}).WithTimeout(2 * time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
	})
})

// ownSecretsSigningKey signs the webhooks of endpoints made by ownEndpoint.
const ownSecretsSigningKey = "whsec_e2e_own_endpoints_secret"

// ownEndpoint is an endpoint of the Stripe orders sample's shape named name, whose
// Secrets are its spec's own (Secret e2e-own-signing and e2e-own-db, created once): the
// sample's specs rotate and delete the sample's, and specs run in random order.
func ownEndpoint(ctx context.Context, name string) *v1alpha1.WebhookEndpoint {
	ns := session.Samples.Namespace
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "e2e-own-signing", Namespace: ns}, StringData: map[string]string{"current": ownSecretsSigningKey}},
		{ObjectMeta: metav1.ObjectMeta{Name: "e2e-own-db", Namespace: ns}, StringData: map[string]string{"uri": databaseURL}},
	} {
		if err := session.Samples.Client.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
			Expect(err).NotTo(HaveOccurred())
		}
	}
	ep := &v1alpha1.WebhookEndpoint{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	ep.Spec = *session.Samples.Endpoints[0].Spec.DeepCopy()
	ep.Spec.SigningSecrets = []v1alpha1.SigningSecret{{SecretKeyRef: corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "e2e-own-signing"}, Key: "current"}}}
	ep.Spec.Database.URLSecretRef = corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "e2e-own-db"}, Key: "uri"}
	ep.Spec.Exposure = nil
	return ep
}

// createOwnEndpoint creates ownEndpoint(name), deletes it when the spec (or container)
// ends, and waits up to ready for it to report Ready.
func createOwnEndpoint(ctx context.Context, name string, ready time.Duration) *v1alpha1.WebhookEndpoint {
	GinkgoHelper()
	ep := ownEndpoint(ctx, name)
	Expect(session.Samples.Client.Create(ctx, ep)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { _ = session.Samples.Client.Delete(ctx, ep) })
	Eventually(func(g Gomega) {
		cur := &v1alpha1.WebhookEndpoint{}
		g.Expect(session.Samples.Client.Get(ctx, client.ObjectKeyFromObject(ep), cur)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(cur.Status.Conditions, v1alpha1.ConditionReady)).To(BeTrue())
	}).WithContext(ctx).WithTimeout(ready).WithPolling(time.Second).Should(Succeed())
	return ep
}

// `hookkeeper send-test` against an endpoint of the Stripe orders sample's shape, as a user runs it
// against `make dev`'s cluster: the binary, the dev cluster's kubeconfig, no --url (it
// finds a ready receiver pod behind the endpoint's Service) and no --database-url (the
// dev database is reachable at the URL its Secret holds).
var _ = Describe("hookkeeper send-test", func() {
	It("sends the deployed endpoint a signed test event and reports its receipt and delivery", func(ctx SpecContext) {
		// An endpoint of its own: the sample's specs rotate and delete the sample's, and
		// specs run in random order.
		ep := createOwnEndpoint(ctx, "sendtest-e2e", 90*time.Second)
		before := len(session.Sink.Deliveries())
		cmd := exec.CommandContext(ctx, hookkeeperBinary, "send-test",
			"--kubeconfig", session.Cluster.KubeconfigPath(), "-n", session.Samples.Namespace, ep.Name)
		out, err := cmd.CombinedOutput()
		report := string(out)
		GinkgoWriter.Printf("hookkeeper send-test:\n%s\n", report)
		Expect(err).NotTo(HaveOccurred(), report)
		Expect(report).To(ContainSubstring("of Service " + ep.Name + "-receiver"))
		Expect(report).To(ContainSubstring("answer:    200"))
		Expect(report).To(ContainSubstring("receipt:   applied"))
		Expect(report).To(ContainSubstring("entity:    " + demo.TestOrder + " is payment_pending"))
		Expect(report).To(MatchRegexp(`outbox:    order\.test \(row \d+\) delivered at`))
		Expect(report).NotTo(ContainSubstring(ownSecretsSigningKey))
		Expect(report).NotTo(ContainSubstring(databaseURL))

		Eventually(func() []string {
			var types []string
			for _, d := range session.Sink.Deliveries()[before:] {
				types = append(types, d.EventType)
			}
			return types
		}).WithTimeout(10 * time.Second).Should(ContainElement("order.test"))
		Expect(strings.Count(report, "POST")).To(Equal(1))
	}, SpecTimeout(4*time.Minute))
})

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

// deliverUntilAcknowledged retries like a provider: on a transport error or a non-2xx
// status, send the same event again, for up to 30 seconds.
func deliverUntilAcknowledged(ctx context.Context, url, secret string, body []byte) error {
	return deliverWith(ctx, url, func() string { return secret }, body, 30*time.Second)
}

// deliverWith sends body signed with key() until it is acknowledged or within has
// passed; key is read per attempt, so a sender can switch keys mid-retry.
func deliverWith(ctx context.Context, url string, key func() string, body []byte, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		code, err := demo.PostStripe(ctx, url, key(), body)
		if err == nil && code >= 200 && code < 300 {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("not acknowledged within %s: %w", within, err)
			}
			return fmt.Errorf("not acknowledged within %s (last status %d)", within, code)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// paced calls send(0), send(1), ... once per interval, the steady rate of a provider's
// sender, until stop is closed or send returns false.
func paced(stop <-chan struct{}, interval time.Duration, send func(i int) bool) {
	pace := time.NewTicker(interval)
	defer pace.Stop()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-pace.C:
		}
		if !send(i) {
			return
		}
	}
}

func rolledOut(d *appsv1.Deployment) bool {
	want := *d.Spec.Replicas
	return d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == want &&
		d.Status.ReadyReplicas == want && d.Status.Replicas == want
}

// receiverPods lists the Deployment's live, ready pods.
func receiverPods(ctx context.Context, g Gomega, d *appsv1.Deployment) []corev1.Pod {
	list, err := clientset.CoreV1().Pods(d.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(d.Spec.Selector.MatchLabels).String(),
	})
	g.Expect(err).NotTo(HaveOccurred())
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].Ready {
			out = append(out, p)
		}
	}
	return out
}
