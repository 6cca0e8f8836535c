package controllers_test

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/controllers"
	"github.com/hookkeeper/hookkeeper/internal/resources"
)

// testForeignObjectsAreNotTakenOver: an app's own Service and Ingress that happen to
// carry the names the endpoint's would get are left exactly as they were (server-side
// apply with forced ownership would rewrite them, and a controller reference would
// delete them with the endpoint). Ready is False with NotOwned naming the object, the
// endpoint is Stalled, and a Warning Event says the same. Once the app's Service is
// gone, the endpoint creates its own and the reason clears.
func (e *env) testForeignObjectsAreNotTakenOver(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespace(t)
	e.withSecrets(t, ns)
	service := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "orders-receiver", Namespace: ns},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "orders-frontend"},
			Ports:    []corev1.ServicePort{{Name: "web", Port: 80, TargetPort: intstr.FromInt32(3000)}},
		},
	}
	ingress := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: ns},
		Spec: networkingv1.IngressSpec{DefaultBackend: &networkingv1.IngressBackend{
			Service: &networkingv1.IngressServiceBackend{Name: "storefront", Port: networkingv1.ServiceBackendPort{Number: 80}},
		}},
	}
	g.Expect(e.k8s.Create(e.ctx, service)).To(Succeed())
	g.Expect(e.k8s.Create(e.ctx, ingress)).To(Succeed())
	ep := validEndpoint(ns, "orders")
	ep.Spec.Exposure = &v1alpha1.ExposureSpec{Ingress: &v1alpha1.IngressExposure{Host: "hooks.shop.example"}}
	ep = e.create(t, ep)
	e.migrated(t, ep)

	g.Eventually(func(g Gomega) {
		cur := e.endpoint(g, ep)
		ready := condition(cur, v1alpha1.ConditionReady)
		g.Expect(ready.Reason).To(Equal(controllers.ReasonNotOwned), "Ready: %+v", ready)
		g.Expect(ready.Message).To(ContainSubstring("Service " + ns + "/orders-receiver exists and is not managed by this WebhookEndpoint"))
		g.Expect(condition(cur, v1alpha1.ConditionStalled).Reason).To(Equal(controllers.ReasonNotOwned))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	e.expectEvent(t, ep, corev1.EventTypeWarning, controllers.ReasonNotOwned, "orders-receiver")
	live := &corev1.Service{}
	g.Expect(e.k8s.Get(e.ctx, client.ObjectKeyFromObject(service), live)).To(Succeed())
	g.Expect(live.OwnerReferences).To(BeEmpty(), "the app's Service was adopted")
	g.Expect(live.Spec.Selector).To(Equal(service.Spec.Selector), "the app's Service was rewritten")

	// The app's Service goes: the endpoint's own comes, and the Ingress is next.
	g.Expect(e.k8s.Delete(e.ctx, live)).To(Succeed())
	g.Eventually(func(g Gomega) {
		own := &corev1.Service{}
		g.Expect(e.k8s.Get(e.ctx, client.ObjectKeyFromObject(service), own)).To(Succeed())
		g.Expect(own.Spec.Selector).To(Equal(resources.SelectorLabels(ep)))
		ready := condition(e.endpoint(g, ep), v1alpha1.ConditionReady)
		g.Expect(ready.Reason).To(Equal(controllers.ReasonNotOwned), "Ready: %+v", ready)
		g.Expect(ready.Message).To(ContainSubstring("Ingress " + ns + "/orders exists and is not managed"))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	liveIngress := &networkingv1.Ingress{}
	g.Expect(e.k8s.Get(e.ctx, client.ObjectKeyFromObject(ingress), liveIngress)).To(Succeed())
	g.Expect(liveIngress.OwnerReferences).To(BeEmpty(), "the app's Ingress was adopted")
	g.Expect(liveIngress.Spec.Rules).To(BeEmpty(), "the app's Ingress was rewritten")
	g.Expect(liveIngress.Spec.DefaultBackend.Service.Name).To(Equal("storefront"))
}

// testFailedStepIsReported: a write the API server refuses (here a
// ValidatingAdmissionPolicy of the cluster's admins forbids NetworkPolicies in the
// namespace) reaches Ready and a Warning Event with the step and the API server's
// words, not only the operator's log, and clears once the write goes through.
func (e *env) testFailedStepIsReported(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespace(t)
	e.withSecrets(t, ns)
	name := "freeze-netpol-" + ns
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
					Rule: admissionv1.Rule{APIGroups: []string{"networking.k8s.io"}, APIVersions: []string{"v1"},
						Resources: []string{"networkpolicies"}},
				},
			}}},
			Validations: []admissionv1.Validation{{Expression: "false", Message: "network policies are frozen in this namespace"}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
			MatchResources: &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}},
		},
	}
	for _, obj := range []client.Object{policy, binding} {
		g.Expect(e.k8s.Create(e.ctx, obj)).To(Succeed())
		t.Cleanup(func() { _ = e.k8s.Delete(context.Background(), obj) })
	}
	// The policy is in force once a NetworkPolicy of the namespace is refused.
	g.Eventually(func() error {
		probe := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: ns}}
		if err := e.k8s.Create(e.ctx, probe); err == nil {
			_ = e.k8s.Delete(e.ctx, probe)
			return errors.New("the admission policy is not in force yet")
		}
		return nil
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

	ep := e.create(t, validEndpoint(ns, "frozen"))
	e.migrated(t, ep)
	g.Eventually(func(g Gomega) {
		cur := e.endpoint(g, ep)
		ready := condition(cur, v1alpha1.ConditionReady)
		g.Expect(ready.Reason).To(Equal(controllers.ReasonStepFailed), "Ready: %+v", ready)
		g.Expect(ready.Message).To(And(ContainSubstring("network policy: apply NetworkPolicy"),
			ContainSubstring("network policies are frozen in this namespace")))
		g.Expect(condition(cur, v1alpha1.ConditionReconciling).Status).To(Equal(metav1.ConditionTrue))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	e.expectEvent(t, ep, corev1.EventTypeWarning, controllers.ReasonStepFailed, "network policies are frozen")

	// The admins lift the freeze: the retried step goes through and the reason clears.
	g.Expect(e.k8s.Delete(e.ctx, binding)).To(Succeed())
	g.Eventually(func(g Gomega) {
		e.makeAvailable(t, ep)
		ready := condition(e.endpoint(g, ep), v1alpha1.ConditionReady)
		g.Expect(ready.Reason).NotTo(Equal(controllers.ReasonStepFailed), "Ready: %+v", ready)
		g.Expect(e.k8s.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: resources.ReceiverName(ep)}, &networkingv1.NetworkPolicy{})).To(Succeed())
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
}

// testScaledToZeroIsNotReady: spec.receiver.replicas 0 is allowed (Minimum 0), but with
// no receiver pod nothing answers the provider: ReceiverAvailable is False with
// ScaledToZero and Ready says so, never "receiving webhooks at ...".
func (e *env) testScaledToZeroIsNotReady(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespace(t)
	e.withSecrets(t, ns)
	ep := validEndpoint(ns, "paused")
	ep.Spec.Receiver.Replicas = ptr.To[int32](0)
	ep = e.create(t, ep)
	e.migrated(t, ep)
	g.Eventually(func(g Gomega) {
		e.makeAvailable(t, ep)
		cur := e.endpoint(g, ep)
		c := condition(cur, v1alpha1.ConditionReceiverAvailable)
		g.Expect(c.Reason).To(Equal(controllers.ReasonScaledToZero), "ReceiverAvailable: %+v", c)
		g.Expect(c.Message).To(ContainSubstring("set replicas to 1 or more"))
		ready := condition(cur, v1alpha1.ConditionReady)
		g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ready.Reason).To(Equal(controllers.ReasonScaledToZero))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
}

// testImageOverrideNeedsAllowing: spec.receiver.image puts the Secrets the endpoint
// names into a pod running that image, so whoever may edit endpoints could read any
// Secret of the namespace with an image of their own. An image the operator does not
// allow (--allowed-receiver-images) stops the endpoint at ConfigValid, before any Job
// or pod; an allowed one (a prefix entry) runs.
func (e *env) testImageOverrideNeedsAllowing(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespace(t)
	e.withSecrets(t, ns)
	ep := validEndpoint(ns, "exfil")
	ep.Spec.Receiver.Image = "attacker.example/exfil:1"
	ep = e.create(t, ep)
	cur := e.waitCondition(t, ep, v1alpha1.ConditionConfigValid, metav1.ConditionFalse, controllers.ReasonInvalidConfig)
	g.Expect(condition(cur, v1alpha1.ConditionConfigValid).Message).To(And(
		ContainSubstring(`spec.receiver.image "attacker.example/exfil:1" is not an image this operator runs`),
		ContainSubstring("--allowed-receiver-images")))
	g.Expect(apierrors.IsNotFound(e.k8s.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: resources.MigrationJobName(ep)}, &batchv1.Job{}))).
		To(BeTrue(), "no migration Job for a refused image")
	g.Expect(apierrors.IsNotFound(e.k8s.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: resources.ReceiverName(ep)}, &appsv1.Deployment{}))).
		To(BeTrue(), "no Deployment for a refused image")

	allowed := validEndpoint(ns, "pinned-ok")
	allowed.Spec.Receiver.Image = "registry.example/hookkeeper-receiver:v1.2.3"
	allowed = e.create(t, allowed)
	e.waitCondition(t, allowed, v1alpha1.ConditionConfigValid, metav1.ConditionTrue, controllers.ReasonValid)
}

// expectEvent waits for an Event about ep of type and reason whose note contains text.
func (e *env) expectEvent(t *testing.T, ep *v1alpha1.WebhookEndpoint, eventType, reason, text string) {
	t.Helper()
	e.expectEventOn(t, ep.Namespace, ep.Name, eventType, reason, text)
}

// expectEventOn waits for an Event about the object named name in ns, of type and
// reason, whose note contains text.
func (e *env) expectEventOn(t *testing.T, ns, name, eventType, reason, text string) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		var list eventsv1.EventList
		g.Expect(e.k8s.List(e.ctx, &list, client.InNamespace(ns))).To(Succeed())
		var notes []string
		for _, ev := range list.Items {
			if ev.Regarding.Name == name && ev.Type == eventType && ev.Reason == reason {
				notes = append(notes, ev.Note)
			}
		}
		g.Expect(notes).To(ContainElement(ContainSubstring(text)))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
}
