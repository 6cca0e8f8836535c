package controllers_test

import (
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/controllers"
	"github.com/hookkeeper/hookkeeper/internal/resources"
)

// largePooledEndpoint is a pooled endpoint near the CRD's size bounds: 16 transitions of
// 32 event types of 250 characters each and a long guard (about 160 kB rendered).
func largePooledEndpoint(ns, name, pool string) *v1alpha1.WebhookEndpoint {
	ep := pooled(ns, name, pool)
	sm := &ep.Spec.StateMachine
	sm.Transitions = nil
	for i := range 16 {
		var on []string
		for j := range 32 {
			on = append(on, fmt.Sprintf("t%02d.e%02d.%s", i, j, strings.Repeat("x", 240)))
		}
		sm.Transitions = append(sm.Transitions, v1alpha1.Transition{
			Name: fmt.Sprintf("tr%02d", i), On: on, From: []string{"payment_pending"}, To: "paid",
			Guard: `entity.key != "` + strings.Repeat("k", 1900) + `"`,
		})
	}
	return ep
}

// testPoolFailuresAreReported: what stops a pool's receivers reaches the pool's status
// and Events, not only the operator's log. Members that together outgrow the 1 MiB a
// Secret may hold stall the pool with PoolSecretTooLarge, naming the Secret and what
// to do; an image override the operator does not allow stalls it before any pod runs.
func (e *env) testPoolFailuresAreReported(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespace(t)
	e.withPoolSecrets(t, ns)

	big := &v1alpha1.WebhookReceiverPool{ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: ns}}
	g.Expect(e.k8s.Create(e.ctx, big)).To(Succeed())
	for i := range 8 {
		e.create(t, largePooledEndpoint(ns, fmt.Sprintf("large-%d", i), big.Name))
	}
	g.Eventually(func(g Gomega) {
		p := e.pool(g, ns, big.Name)
		ready := conditionOf(p.Status.Conditions, v1alpha1.ConditionReady)
		g.Expect(ready.Reason).To(Equal(controllers.ReasonPoolTooLarge), "Ready: %+v", ready)
		g.Expect(ready.Message).To(And(ContainSubstring(resources.PoolEndpointsSecret(big.Name)),
			ContainSubstring("move some endpoints to another WebhookReceiverPool")))
		g.Expect(conditionOf(p.Status.Conditions, v1alpha1.ConditionStalled).Status).To(Equal(metav1.ConditionTrue))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	e.expectEventOn(t, ns, big.Name, corev1.EventTypeWarning, controllers.ReasonPoolTooLarge, "more than the 1048576")

	odd := &v1alpha1.WebhookReceiverPool{ObjectMeta: metav1.ObjectMeta{Name: "odd", Namespace: ns},
		Spec: v1alpha1.WebhookReceiverPoolSpec{Image: "attacker.example/exfil:1"}}
	g.Expect(e.k8s.Create(e.ctx, odd)).To(Succeed())
	g.Eventually(func(g Gomega) {
		p := e.pool(g, ns, odd.Name)
		ready := conditionOf(p.Status.Conditions, v1alpha1.ConditionReady)
		g.Expect(ready.Reason).To(Equal(controllers.ReasonInvalidConfig), "Ready: %+v", ready)
		g.Expect(ready.Message).To(ContainSubstring(`spec.image "attacker.example/exfil:1" is not an image this operator runs`))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	err := e.k8s.Get(e.ctx, key(ns, resources.PoolName(odd.Name)), &appsv1.Deployment{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no Deployment for a refused image: %v", err)
}

// conditionOf finds a condition by type, or an empty one.
func conditionOf(conds []metav1.Condition, t string) metav1.Condition {
	for _, c := range conds {
		if c.Type == t {
			return c
		}
	}
	return metav1.Condition{}
}
