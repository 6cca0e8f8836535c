package controllers_test

import (
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
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

// testFailedStepIsReported: a write the API server refuses (a Deployment of the
// receiver's name whose immutable selector differs, left by someone else's controller
// after its owner reference was removed) reaches Ready and a Warning Event with the
// step and the API server's words, not only the operator's log.
func (e *env) testFailedStepIsReported(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespace(t)
	e.withSecrets(t, ns)
	ep := e.create(t, validEndpoint(ns, "legacy"))
	e.migrated(t, ep)
	d := &appsv1.Deployment{}
	g.Eventually(func() error {
		return e.k8s.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: resources.ReceiverName(ep)}, d)
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	// Delete it and put back one with another selector, owned by the endpoint (so
	// ownership is not the problem): the apply must change an immutable field.
	g.Expect(e.k8s.Delete(e.ctx, d, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
	labels := map[string]string{"app": "legacy-orders"}
	replaced := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: ns, OwnerReferences: d.OwnerReferences},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "legacy:1"}}},
			},
		},
	}
	g.Eventually(func() error {
		err := e.k8s.Create(e.ctx, replaced)
		if apierrors.IsAlreadyExists(err) {
			return err // the old one is still being deleted, or the operator re-created it
		}
		return nil
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	e.touch(t, ep)
	g.Eventually(func(g Gomega) {
		cur := e.endpoint(g, ep)
		ready := condition(cur, v1alpha1.ConditionReady)
		g.Expect(ready.Reason).To(Equal(controllers.ReasonStepFailed), "Ready: %+v", ready)
		g.Expect(ready.Message).To(And(ContainSubstring("deployment: apply Deployment"), ContainSubstring("immutable")))
		g.Expect(condition(cur, v1alpha1.ConditionReconciling).Status).To(Equal(metav1.ConditionTrue))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	e.expectEvent(t, ep, corev1.EventTypeWarning, controllers.ReasonStepFailed, "immutable")
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

// expectEvent waits for an Event about ep of type and reason whose note contains text.
func (e *env) expectEvent(t *testing.T, ep *v1alpha1.WebhookEndpoint, eventType, reason, text string) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		var list eventsv1.EventList
		g.Expect(e.k8s.List(e.ctx, &list, client.InNamespace(ep.Namespace))).To(Succeed())
		var notes []string
		for _, ev := range list.Items {
			if ev.Regarding.Name == ep.Name && ev.Type == eventType && ev.Reason == reason {
				notes = append(notes, ev.Note)
			}
		}
		g.Expect(notes).To(ContainElement(ContainSubstring(text)))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
}
