package controllers_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/gomega" //nolint:revive // gomega's matchers read best unqualified
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/controllers"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/resources"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

func (e *env) pool(g Gomega, ns, name string) *v1alpha1.WebhookReceiverPool {
	p := &v1alpha1.WebhookReceiverPool{}
	g.ExpectWithOffset(1, e.k8s.Get(e.ctx, key(ns, name), p)).To(Succeed())
	return p
}

func pooled(ns, name, pool string) *v1alpha1.WebhookEndpoint {
	ep := validEndpoint(ns, name)
	ep.Spec.Receiver.PoolRef = &v1alpha1.PoolReference{Name: pool}
	return ep
}

// poolCondition reads the pool and its condition condType, which must be set.
func (e *env) poolCondition(g Gomega, ns, name, condType string) (*v1alpha1.WebhookReceiverPool, *metav1.Condition) {
	p := e.pool(g, ns, name)
	c := meta.FindStatusCondition(p.Status.Conditions, condType)
	g.ExpectWithOffset(1, c).NotTo(BeNil(), "pool %s has no %s condition", name, condType)
	return p, c
}

// withPoolSecrets creates the Secrets a pooled validEndpoint references, the database
// URL pointing at a real, migrated database (the operator reads the schema version and
// the pool's heartbeats there, which tests write as the pool's receivers would), and
// returns that URL.
func (e *env) withPoolSecrets(t *testing.T, ns string) string {
	t.Helper()
	dbURL := testsupport.MigratedDatabase(t, "hookkeeper")
	e.secret(t, ns, "stripe", map[string]string{"current": "whsec_current"})
	e.secret(t, ns, "db-app", map[string]string{"uri": dbURL})
	return dbURL
}

// poolFiles reads the pool's endpoints Secret: file name to content.
func (e *env) poolFiles(g Gomega, p *v1alpha1.WebhookReceiverPool) map[string]string {
	s := &corev1.Secret{}
	g.ExpectWithOffset(1, e.k8s.Get(e.ctx, key(p.Namespace, resources.PoolEndpointsSecret(p.Name)), s)).To(Succeed())
	files := map[string]string{}
	for k, v := range s.Data {
		files[k] = string(v)
	}
	return files
}

// testReceiverPool: a pool serves the endpoints that name it from one Deployment that
// reads them from a Secret; the endpoints get no Deployment of their own, take their
// URL and availability from the pool, and a pool lists each member (a member whose
// Secret is missing is listed as not loaded, with why, and the others are served). A
// Secret rotation reaches the pool's Secret without rolling its pods; an endpoint that
// leaves the pool gets its receivers back; an endpoint naming a missing pool says so.
func (e *env) testReceiverPool(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespace(t)
	dbURL := e.withPoolSecrets(t, ns)
	p := &v1alpha1.WebhookReceiverPool{ObjectMeta: metav1.ObjectMeta{Name: "shared", Namespace: ns}}
	g.Expect(e.k8s.Create(e.ctx, p)).To(Succeed())
	a := e.create(t, pooled(ns, "orders", "shared"))
	b := e.create(t, pooled(ns, "refunds", "shared"))
	broken := pooled(ns, "broken", "shared")
	broken.Spec.SigningSecrets[0].SecretKeyRef = keyRef("absent", "current")
	e.create(t, broken)

	// One Deployment for the pool, reading its endpoints from the mounted Secret.
	d := &appsv1.Deployment{}
	g.Eventually(func(g Gomega) {
		g.Expect(e.k8s.Get(e.ctx, key(ns, resources.PoolName(p.Name)), d)).To(Succeed())
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	g.Expect(d.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--endpoints-dir=" + resources.PoolEndpointsDir))
	g.Expect(d.Spec.Template.Spec.Containers[0].Args).To(ContainElement(fmt.Sprintf("--pool-max-in-flight=%d", v1alpha1.DefaultMaxInFlight)))
	g.Expect(d.Spec.Template.Spec.Volumes).To(ContainElement(HaveField("Secret.SecretName", resources.PoolEndpointsSecret(p.Name))))
	g.Expect(*d.Spec.Replicas).To(Equal(int32(v1alpha1.DefaultReplicas)))
	g.Expect(*d.Spec.Template.Spec.AutomountServiceAccountToken).To(BeFalse())
	// The pool's pods are fenced as an endpoint's own are (spec.networkPolicy defaults
	// to enabled), and the fence goes when the pool disables it.
	np := &networkingv1.NetworkPolicy{}
	g.Eventually(func() error {
		return e.k8s.Get(e.ctx, key(ns, resources.PoolName(p.Name)), np)
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	g.Expect(np.Spec.PodSelector.MatchLabels).To(Equal(d.Spec.Selector.MatchLabels))
	g.Expect(np.Spec.Ingress).To(HaveLen(2))
	fence := client.MergeFrom(p.DeepCopy())
	p.Spec.NetworkPolicy.Enabled = ptr.To(false)
	g.Expect(e.k8s.Patch(e.ctx, p, fence)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(e.k8s.Get(e.ctx, key(ns, resources.PoolName(p.Name)), &networkingv1.NetworkPolicy{}))
	}).WithTimeout(timeout).WithPolling(poll).Should(BeTrue(), "the pool's NetworkPolicy is removed when disabled")
	for _, env := range d.Spec.Template.Spec.Containers[0].Env {
		g.Expect(env.ValueFrom == nil || env.ValueFrom.SecretKeyRef == nil).To(BeTrue(), "no Secret in the pool's env: %+v", env)
	}
	g.Eventually(func(g Gomega) {
		files := e.poolFiles(g, p)
		g.Expect(files).To(HaveKey("orders.json"))
		g.Expect(files).To(HaveKey("refunds.json"))
		g.Expect(files).NotTo(HaveKey("broken.json"))
		g.Expect(files["orders.env"]).To(ContainSubstring(config.EnvDatabaseURL + "=" + dbURL + "\n"))
		g.Expect(files["orders.env"]).To(ContainSubstring(config.EnvSigningSecretPrefix + "0=whsec_current\n"))
		g.Expect(files["orders.json"]).To(ContainSubstring(`"name":"orders"`))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

	// No receivers of their own, and no migration Job: the operator finds the shared
	// schema already at this version.
	for _, ep := range []*v1alpha1.WebhookEndpoint{a, b} {
		cur := e.waitCondition(t, ep, v1alpha1.ConditionDatabaseMigrated, metav1.ConditionTrue, controllers.ReasonMigrated)
		g.Expect(condition(cur, v1alpha1.ConditionDatabaseMigrated).Message).To(ContainSubstring("no Job needed"))
		err := e.k8s.Get(e.ctx, key(ns, resources.MigrationJobName(ep)), &batchv1.Job{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no migration Job for an already migrated schema: %v", err)
		err = e.k8s.Get(e.ctx, key(ns, resources.ReceiverName(ep)), &appsv1.Deployment{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "a pooled endpoint has no Deployment: %v", err)
	}
	e.waitCondition(t, a, v1alpha1.ConditionReceiverAvailable, metav1.ConditionFalse, controllers.ReasonUnavailable)

	e.makeDeploymentAvailable(t, key(ns, resources.PoolName(p.Name)))
	// The pool is available, but none of its receivers has said it serves the
	// endpoint's current config: not Ready yet.
	cur := e.waitCondition(t, a, v1alpha1.ConditionReceiverAvailable, metav1.ConditionFalse, controllers.ReasonNotLoaded)
	g.Expect(condition(cur, v1alpha1.ConditionReceiverAvailable).Message).To(ContainSubstring("(0 of 0 report it)"))
	// A receiver of the pool reports it, ready, with the manifest the operator rendered.
	sum := sha256.Sum256([]byte(e.poolFiles(g, p)["orders.json"]))
	db, err := pgx.Connect(e.ctx, dbURL)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = db.Close(context.Background()) }()
	_, err = db.Exec(e.ctx, `INSERT INTO hookkeeper.receiver_heartbeats (endpoint, pod, pool, ready, config_hash, seen_at)
VALUES ($1, 'shared-pool-0', 'shared', true, $2, now())`, ns+"/orders", hex.EncodeToString(sum[:8])+"-0123abcd")
	g.Expect(err).NotTo(HaveOccurred())
	cur = e.waitCondition(t, a, v1alpha1.ConditionReady, metav1.ConditionTrue, controllers.ReasonReady)
	g.Expect(cur.Status.URL).To(Equal("http://shared-pool." + ns + ".svc/orders/stripe"))
	g.Expect(condition(cur, v1alpha1.ConditionReceiverAvailable).Message).To(ContainSubstring("served by WebhookReceiverPool shared at /orders/stripe (1 receiver(s) serve its current config)"))
	e.waitCondition(t, broken, v1alpha1.ConditionSecretsResolved, metav1.ConditionFalse, controllers.ReasonSecretNotFound)

	g.Eventually(func(g Gomega) {
		cur := e.pool(g, ns, "shared")
		g.Expect(cur.Status.EndpointCount).To(Equal(int32(3)))
		g.Expect(cur.Status.URL).To(Equal("http://shared-pool." + ns + ".svc"))
		g.Expect(cur.Status.Endpoints).To(HaveLen(3))
		g.Expect(cur.Status.Endpoints[0]).To(And(HaveField("Name", "broken"), HaveField("Loaded", false), HaveField("Ready", false),
			HaveField("Message", ContainSubstring("Secret "+ns+"/absent not found"))))
		g.Expect(cur.Status.Endpoints[1]).To(And(HaveField("Name", "orders"), HaveField("Loaded", true), HaveField("Path", "/orders/stripe"),
			HaveField("Ready", true)), "the pool lists the member's own Ready")
		g.Expect(cur.Status.Endpoints[2]).To(And(HaveField("Name", "refunds"), HaveField("Loaded", true), HaveField("Ready", false)),
			"no receiver reports refunds yet")
		ready := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(ready.Reason).To(Equal(controllers.ReasonMembersNotReady))
		g.Expect(ready.Message).To(ContainSubstring("2 of 3 endpoint(s) served"))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

	// A rotation reaches the pool's Secret; the pool's pods do not roll.
	template := d.Spec.Template.DeepCopy()
	stripe := &corev1.Secret{}
	g.Expect(e.k8s.Get(e.ctx, key(ns, "stripe"), stripe)).To(Succeed())
	stripe.Data["current"] = []byte("whsec_rotated")
	g.Expect(e.k8s.Update(e.ctx, stripe)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(e.poolFiles(g, p)["orders.env"]).To(ContainSubstring(config.EnvSigningSecretPrefix + "0=whsec_rotated\n"))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	g.Expect(e.k8s.Get(e.ctx, key(ns, resources.PoolName(p.Name)), d)).To(Succeed())
	g.Expect(d.Spec.Template).To(Equal(*template), "a member's rotation must not roll the pool")

	// Leaving the pool: the endpoint gets its own receivers, the pool drops it.
	cur = e.endpoint(g, b)
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Spec.Receiver.PoolRef = nil
	g.Expect(e.k8s.Patch(e.ctx, cur, patch)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(e.k8s.Get(e.ctx, key(ns, resources.ReceiverName(b)), &appsv1.Deployment{})).To(Succeed())
		g.Expect(e.poolFiles(g, p)).NotTo(HaveKey("refunds.json"))
		g.Expect(e.pool(g, ns, "shared").Status.EndpointCount).To(Equal(int32(2)))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

	// Autoscaling hands replicas to an HPA.
	cp := e.pool(g, ns, "shared")
	patchPool := client.MergeFrom(cp.DeepCopy())
	cp.Spec.Autoscaling = &v1alpha1.AutoscalingSpec{MaxReplicas: 5}
	g.Expect(e.k8s.Patch(e.ctx, cp, patchPool)).To(Succeed())
	g.Eventually(func(g Gomega) {
		hpa := &autoscalingv2.HorizontalPodAutoscaler{}
		g.Expect(e.k8s.Get(e.ctx, key(ns, resources.PoolName(p.Name)), hpa)).To(Succeed())
		g.Expect(hpa.Spec.MaxReplicas).To(Equal(int32(5)))
		g.Expect(*hpa.Spec.MinReplicas).To(Equal(int32(v1alpha1.DefaultMinReplicas)))
		g.Expect(hpa.Spec.ScaleTargetRef.Name).To(Equal(resources.PoolName(p.Name)))
		d := &appsv1.Deployment{}
		g.Expect(e.k8s.Get(e.ctx, key(ns, resources.PoolName(p.Name)), d)).To(Succeed())
		for _, mf := range d.ManagedFields {
			if mf.Manager == controllers.FieldOwner && mf.FieldsV1 != nil {
				g.Expect(mf.FieldsV1.GetRawString()).NotTo(ContainSubstring(`"f:replicas"`), "the operator must not own replicas the HPA owns")
			}
		}
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

	// A missing pool is named.
	lost := e.create(t, pooled(ns, "lost", "nowhere"))
	e.migrated(t, lost)
	cur = e.waitCondition(t, lost, v1alpha1.ConditionReceiverAvailable, metav1.ConditionFalse, controllers.ReasonPoolNotFound)
	g.Expect(condition(cur, v1alpha1.ConditionReceiverAvailable).Message).To(ContainSubstring("WebhookReceiverPool nowhere, which does not exist"))
}

// testAutoscaling: spec.receiver.autoscaling gives a dedicated endpoint an HPA; the
// Deployment's replicas are then the HPA's, and removing autoscaling removes it.
func (e *env) testAutoscaling(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespaceWithSecrets(t)
	ep := validEndpoint(ns, "busy")
	ep.Spec.Receiver.Autoscaling = &v1alpha1.AutoscalingSpec{MinReplicas: ptr.To[int32](3), MaxReplicas: 10}
	e.create(t, ep)
	e.completeJob(t, ep)
	hpa := &autoscalingv2.HorizontalPodAutoscaler{}
	g.Eventually(func() error {
		return e.k8s.Get(e.ctx, key(ns, resources.ReceiverName(ep)), hpa)
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	g.Expect(*hpa.Spec.MinReplicas).To(Equal(int32(3)))
	g.Expect(hpa.Spec.Metrics[0].Resource.Target.AverageUtilization).To(Equal(ptr.To[int32](v1alpha1.DefaultTargetCPUUtilization)))

	cur := e.endpoint(g, ep)
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Spec.Receiver.Autoscaling = nil
	g.Expect(e.k8s.Patch(e.ctx, cur, patch)).To(Succeed())
	e.expectGone(g, key(ns, resources.ReceiverName(ep)), &autoscalingv2.HorizontalPodAutoscaler{})

	// A pooled endpoint cannot also autoscale on its own, nor be exposed (yet).
	bad := pooled(ns, "both", "shared")
	bad.Spec.Receiver.Autoscaling = &v1alpha1.AutoscalingSpec{MaxReplicas: 2}
	err := e.k8s.Create(e.ctx, bad)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
	g.Expect(strings.Contains(err.Error(), "a pooled endpoint scales with its pool")).To(BeTrue(), "%v", err)
}

// testPoolExposure: a pool's spec.exposure publishes its Service through one Ingress
// (the endpoints' own builder) serving every member under the host; once the Ingress has
// an address the pool is Exposed with a public base URL and each member's status.url is
// public; an Ingress path other than / is refused; removing the exposure removes the
// Ingress and the members' URLs go back in-cluster.
func (e *env) testPoolExposure(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespace(t)
	e.withPoolSecrets(t, ns)

	refused := &v1alpha1.WebhookReceiverPool{ObjectMeta: metav1.ObjectMeta{Name: "refused", Namespace: ns},
		Spec: v1alpha1.WebhookReceiverPoolSpec{Exposure: &v1alpha1.ExposureSpec{Ingress: &v1alpha1.IngressExposure{
			Host: "hooks.example.com", Path: "/hooks"}}}}
	err := e.k8s.Create(e.ctx, refused)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "an Ingress path other than / on a pool: %v", err)
	g.Expect(err.Error()).To(ContainSubstring("exposure.ingress.path must be empty or /"))

	// A pooled endpoint is exposed by its pool, never by its own spec.exposure.
	own := pooled(ns, "own-route", "public")
	own.Spec.Exposure = &v1alpha1.ExposureSpec{Ingress: &v1alpha1.IngressExposure{Host: "own.example.com"}}
	err = e.k8s.Create(e.ctx, own)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "a pooled endpoint with exposure of its own: %v", err)
	g.Expect(err.Error()).To(ContainSubstring("is exposed by its pool"))

	p := &v1alpha1.WebhookReceiverPool{ObjectMeta: metav1.ObjectMeta{Name: "public", Namespace: ns},
		Spec: v1alpha1.WebhookReceiverPoolSpec{Exposure: &v1alpha1.ExposureSpec{Ingress: &v1alpha1.IngressExposure{
			ClassName: "nginx", Host: "hooks.example.com", TLSSecretName: "hooks-tls"}}}}
	g.Expect(e.k8s.Create(e.ctx, p)).To(Succeed())
	ep := e.create(t, pooled(ns, "orders", "public"))

	ing := &networkingv1.Ingress{}
	g.Eventually(func(g Gomega) {
		g.Expect(e.k8s.Get(e.ctx, key(ns, resources.PoolName(p.Name)), ing)).To(Succeed())
		cur, c := e.poolCondition(g, ns, p.Name, v1alpha1.ConditionExposed)
		g.Expect(c.Reason).To(Equal(controllers.ReasonIngressPending))
		g.Expect(cur.Status.PublicURL).To(BeEmpty())
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	// Available receivers, no address yet: the pool is not Ready, and says why.
	e.makeDeploymentAvailable(t, key(ns, resources.PoolName(p.Name)))
	g.Eventually(func(g Gomega) {
		cur, ready := e.poolCondition(g, ns, p.Name, v1alpha1.ConditionReady)
		g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ready.Reason).To(Equal(controllers.ReasonIngressPending))
		g.Expect(meta.IsStatusConditionTrue(cur.Status.Conditions, v1alpha1.ConditionReconciling)).To(BeTrue())
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	owner := e.pool(g, ns, p.Name)
	g.Expect(ing.OwnerReferences).To(ConsistOf(HaveField("UID", owner.UID)), "the pool owns its Ingress")
	g.Expect(ing.OwnerReferences[0].Kind).To(Equal("WebhookReceiverPool"))
	g.Expect(*ing.Spec.IngressClassName).To(Equal("nginx"))
	g.Expect(ing.Spec.TLS[0].SecretName).To(Equal("hooks-tls"))
	path := ing.Spec.Rules[0].HTTP.Paths[0]
	g.Expect(ing.Spec.Rules[0].Host).To(Equal("hooks.example.com"))
	g.Expect(path.Path).To(Equal("/"), "one rule serves every member under the host")
	g.Expect(path.Backend.Service.Name).To(Equal(resources.PoolName(p.Name)))
	g.Expect(path.Backend.Service.Port.Name).To(Equal("http"))

	ing.Status.LoadBalancer.Ingress = []networkingv1.IngressLoadBalancerIngress{{IP: "203.0.113.7"}}
	g.Expect(e.k8s.Status().Update(e.ctx, ing)).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur, c := e.poolCondition(g, ns, p.Name, v1alpha1.ConditionExposed)
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(c.Reason).To(Equal(controllers.ReasonLoadBalanced))
		g.Expect(cur.Status.PublicURL).To(Equal("https://hooks.example.com"))
		g.Expect(meta.IsStatusConditionTrue(cur.Status.Conditions, v1alpha1.ConditionReady)).To(BeTrue())
		g.Expect(e.endpoint(g, ep).Status.URL).To(Equal("https://hooks.example.com/orders/stripe"))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

	g.Eventually(func(g Gomega) {
		cur := e.pool(g, ns, p.Name)
		cur.Spec.Exposure = nil
		g.Expect(e.k8s.Update(e.ctx, cur)).To(Succeed())
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(apierrors.IsNotFound(e.k8s.Get(e.ctx, key(ns, resources.PoolName(p.Name)), &networkingv1.Ingress{}))).To(BeTrue())
		cur := e.pool(g, ns, p.Name)
		g.Expect(meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionExposed)).To(BeNil())
		g.Expect(cur.Status.PublicURL).To(BeEmpty())
		g.Expect(e.endpoint(g, ep).Status.URL).To(Equal(resources.PoolURL(cur) + "/orders/stripe"))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
}

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

// A pool whose Service name is taken by an app's own Service stalls with NotOwned, and
// its message says "rename or delete it". Once the app's Service is deleted the pool
// must converge, as an endpoint does (testForeignObjectsAreNotTakenOver). The pool's
// failure path returns no error and no requeue for a stalled reason, and nothing the
// pool watches changes when an object it does not own goes, so it never retries.
func (e *env) testPoolRecoversOnceTheForeignObjectIsGone(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespace(t)
	e.withPoolSecrets(t, ns)
	foreign := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: resources.PoolName("shared"), Namespace: ns},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "storefront"},
			Ports:    []corev1.ServicePort{{Name: "web", Port: 80, TargetPort: intstr.FromInt32(3000)}},
		},
	}
	g.Expect(e.k8s.Create(e.ctx, foreign)).To(Succeed())
	p := &v1alpha1.WebhookReceiverPool{ObjectMeta: metav1.ObjectMeta{Name: "shared", Namespace: ns}}
	g.Expect(e.k8s.Create(e.ctx, p)).To(Succeed())
	e.create(t, pooled(ns, "orders", "shared"))

	g.Eventually(func(g Gomega) {
		_, ready := e.poolCondition(g, ns, p.Name, v1alpha1.ConditionReady)
		g.Expect(ready.Reason).To(Equal(controllers.ReasonNotOwned), "Ready: %+v", ready)
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

	g.Expect(e.k8s.Delete(e.ctx, foreign)).To(Succeed())
	g.Eventually(func(g Gomega) {
		own := &corev1.Service{}
		g.Expect(e.k8s.Get(e.ctx, client.ObjectKeyFromObject(foreign), own)).To(Succeed())
		g.Expect(own.Spec.Selector).To(Equal(resources.PoolSelectorLabels(p)), "the pool's own Service")
		_, ready := e.poolCondition(g, ns, p.Name, v1alpha1.ConditionReady)
		g.Expect(ready.Reason).NotTo(Equal(controllers.ReasonNotOwned), "Ready: %+v", ready)
	}).WithTimeout(60*time.Second).WithPolling(poll).Should(Succeed(),
		"the pool never retried after the object in its way was deleted")
}
