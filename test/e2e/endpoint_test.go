package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/ginkgo/v2" //nolint:revive // Ginkgo's DSL reads best unqualified
	. "github.com/onsi/gomega"    //nolint:revive // gomega's matchers read best unqualified
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/devcluster"
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
		body := devcluster.StripeEvent(id, "payment_intent.succeeded", "order-1001", devcluster.SampleOrders["order-1001"], time.Now())
		Expect(devcluster.PostStripe(ctx, url, secret, body)).To(Equal(http.StatusOK))

		var wg sync.WaitGroup
		codes := make(chan int, 16)
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer GinkgoRecover()
				code, err := devcluster.PostStripe(ctx, url, secret, body)
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
		body := devcluster.StripeEvent(id, "payment_intent.succeeded", "order-1004", devcluster.SampleOrders["order-1004"], time.Now())
		Expect(devcluster.PostStripe(ctx, url, "whsec_forged", body)).To(Equal(http.StatusUnauthorized))
		n, _ := receipts(ctx, id)
		Expect(n).To(BeZero())
		Expect(orderState(ctx, "order-1004")).To(Equal("payment_pending"))
	})

	It("rolls the receivers when the signing Secret rotates", func(ctx SpecContext) {
		ns := session.Samples.Namespace
		name := resources.ReceiverName(ep)
		before, err := clientset.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		oldHash := before.Spec.Template.Annotations[resources.AnnotationConfigHash]
		Expect(oldHash).NotTo(BeEmpty())

		ref := ep.Spec.SigningSecrets[0].SecretKeyRef
		rotated := "whsec_rotated_" + run
		s, err := clientset.CoreV1().Secrets(ns).Get(ctx, ref.Name, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		s.Data[ref.Key] = []byte(rotated)
		_, err = clientset.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())

		// The operator changes the pod template's hash; the Deployment controller
		// rolls the pods (maxUnavailable 0), the node agent runs the new ones.
		Eventually(func(g Gomega) {
			d, err := clientset.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(d.Spec.Template.Annotations[resources.AnnotationConfigHash]).NotTo(Equal(oldHash))
			g.Expect(rolledOut(d)).To(BeTrue(), "deployment status %+v", d.Status)
			pods := receiverPods(ctx, g, d)
			g.Expect(pods).To(HaveLen(int(*d.Spec.Replicas)))
			for _, p := range pods {
				g.Expect(p.Annotations[resources.AnnotationConfigHash]).To(Equal(d.Spec.Template.Annotations[resources.AnnotationConfigHash]))
			}
		}).WithTimeout(2 * time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
		session.Samples.SigningSecrets[ep.Name] = rotated

		id := "evt_" + run + "_after_rotation"
		body := devcluster.StripeEvent(id, "payment_intent.succeeded", "order-1002", devcluster.SampleOrders["order-1002"], time.Now())
		Expect(devcluster.PostStripe(ctx, url, secret, body)).To(Equal(http.StatusUnauthorized), "the old secret no longer verifies")
		Expect(devcluster.PostStripe(ctx, url, rotated, body)).To(Equal(http.StatusOK))
		secret = rotated
		n, outcome := receipts(ctx, id)
		Expect(n).To(Equal(1))
		Expect(outcome).To(Equal("applied"))
		Expect(orderState(ctx, "order-1002")).To(Equal("paid"))
	})

	It("loses nothing when a receiver process is killed", func(ctx SpecContext) {
		ns := session.Samples.Namespace
		d, err := clientset.AppsV1().Deployments(ns).Get(ctx, resources.ReceiverName(ep), metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
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
				body := devcluster.StripeEvent(id, "payment_intent.created", "order-1003", 1, time.Now())
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
})

// deliverUntilAcknowledged retries like a provider: on a transport error or a non-2xx
// status, send the same event again, for up to 30 seconds.
func deliverUntilAcknowledged(ctx context.Context, url, secret string, body []byte) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, err := devcluster.PostStripe(ctx, url, secret, body)
		if err == nil && code == http.StatusOK {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("not acknowledged within 30s: %w", err)
			}
			return fmt.Errorf("not acknowledged within 30s (last status %d)", code)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
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
