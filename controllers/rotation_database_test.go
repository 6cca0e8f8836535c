package controllers_test

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/controllers"
	"github.com/hookkeeper/hookkeeper/internal/resources"
)

// Rotating the database URL Secret in place rolls the receiver pods (the keyed config
// hash changes) without scaling them down, and the endpoint is Ready again afterwards.
func (e *env) testDatabaseSecretRotationRollsPods(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespace(t)
	e.withSecrets(t, ns)
	ep := e.ready(t, validEndpoint(ns, "dbrot"))
	d := &appsv1.Deployment{}
	g.Expect(e.k8s.Get(e.ctx, key(ns, resources.ReceiverName(ep)), d)).To(Succeed())
	before := configHash(d)
	replicas := *d.Spec.Replicas

	s := &corev1.Secret{}
	g.Expect(e.k8s.Get(e.ctx, key(ns, "db-app"), s)).To(Succeed())
	s.Data["uri"] = []byte("postgres://app:rotated@db.example:5432/app")
	g.Expect(e.k8s.Update(e.ctx, s)).To(Succeed())

	g.Eventually(func(g Gomega) {
		// Play the Job controller if a new migration Job runs.
		e.migrated(t, ep)
		g.Expect(e.k8s.Get(e.ctx, key(ns, resources.ReceiverName(ep)), d)).To(Succeed())
		g.Expect(*d.Spec.Replicas).To(Equal(replicas), "replicas changed during the rotation")
		g.Expect(configHash(d)).NotTo(Equal(before), "the pod template did not change: the pods keep the old URL")
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	for _, env := range d.Spec.Template.Spec.Containers[0].Env {
		if env.Value != "" && (env.Name == "DATABASE_URL" || strings.Contains(env.Value, "rotated")) {
			t.Errorf("env %s carries the URL value", env.Name)
		}
	}
	e.makeAvailable(t, ep)
	e.waitCondition(t, ep, v1alpha1.ConditionReady, metav1.ConditionTrue, controllers.ReasonReady)
}
