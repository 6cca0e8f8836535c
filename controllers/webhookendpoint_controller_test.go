package controllers_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/controllers"
	"github.com/hookkeeper/hookkeeper/internal/resources"
	"github.com/hookkeeper/hookkeeper/internal/store"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// TestWebhookEndpointController runs every controller scenario against one envtest and
// one manager. The order matters where CRDs get installed: the scenarios without the
// Prometheus Operator and Gateway API CRDs run first.
func TestWebhookEndpointController(t *testing.T) {
	e := startEnv(t)
	t.Run("AdmissionRejectsUnknownTargetState", e.testAdmission)
	t.Run("ValidEndpointMigratesThenRuns", e.testLifecycle)
	t.Run("InvalidCELStopsBeforeAnyPod", e.testInvalidConfig)
	t.Run("MissingSecretKeyStopsBeforeAnyPod", e.testMissingSecret)
	t.Run("MissingKeyNamesOnlyTheReferencedKey", e.testKeyNamesStayPrivate)
	t.Run("SecretRotationRollsPods", e.testRotation)
	t.Run("DatabaseSecretRotationRollsPods", e.testDatabaseSecretRotationRollsPods)
	t.Run("RolloutHashesAreKeyed", e.testKeyedHashes)
	t.Run("ExpiredSecretDroppedAtExpiresAt", e.testExpiry)
	t.Run("MigrationFailureReportsTerminationMessage", e.testMigrationFailure)
	t.Run("MigrationSkippedWhenSchemaIsCurrent", e.testMigrationSkippedWhenCurrent)
	t.Run("UnavailableReceiverNamesThePodsCause", e.testReceiverPodsCause)
	t.Run("ForeignObjectsAreNotTakenOver", e.testForeignObjectsAreNotTakenOver)
	t.Run("FailedStepIsReported", e.testFailedStepIsReported)
	t.Run("ScaledToZeroIsNotReady", e.testScaledToZeroIsNotReady)
	t.Run("AllSecretsExpiredSaysWhyItIsScaledToZero", e.testAllSecretsExpired)
	t.Run("ImageOverrideNeedsAllowing", e.testImageOverrideNeedsAllowing)
	t.Run("NetworkPolicy", e.testNetworkPolicy)
	t.Run("IngressExposure", e.testIngress)
	t.Run("MonitoringOnlyWithCRDs", e.testMonitoring)
	t.Run("HTTPRouteExposure", e.testHTTPRoute)
	t.Run("ReceiverPoolServesItsEndpoints", e.testReceiverPool)
	t.Run("ReceiverPoolFailuresAreReported", e.testPoolFailuresAreReported)
	t.Run("ReceiverPoolRecoversOnceTheForeignObjectIsGone", e.testPoolRecoversOnceTheForeignObjectIsGone)
	t.Run("DedicatedReceiversAutoscale", e.testAutoscaling)
	t.Run("ReceiverPoolExposure", e.testPoolExposure)
	// Last: it checks what the manager did through its cache in every scenario above.
	t.Run("SecretsCachedAsMetadataOnly", e.testSecretsNotCached)
}

func (e *env) testAdmission(t *testing.T) {
	ns := e.namespace(t)
	ep := validEndpoint(ns, "bad-to")
	ep.Spec.StateMachine.Transitions[0].To = "shipped"
	err := e.k8s.Create(e.ctx, ep)
	if err == nil || !apierrors.IsInvalid(err) {
		t.Fatalf("create: %v, want Invalid", err)
	}
	if !strings.Contains(err.Error(), "transition capture: to shipped is not one of stateMachine.states") {
		t.Errorf("message does not name the transition and state: %v", err)
	}
}

func ownedBy(t *testing.T, obj client.Object, ep *v1alpha1.WebhookEndpoint) {
	t.Helper()
	refs := obj.GetOwnerReferences()
	if len(refs) != 1 || refs[0].UID != ep.UID || refs[0].Kind != "WebhookEndpoint" ||
		!ptr.Deref(refs[0].Controller, false) || !ptr.Deref(refs[0].BlockOwnerDeletion, false) {
		t.Errorf("%T %s owner references = %+v: want one controller reference to the endpoint with blockOwnerDeletion",
			obj, obj.GetName(), refs)
	}
}

func (e *env) testLifecycle(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespaceWithSecrets(t)
	ep := e.create(t, validEndpoint(ns, "orders"))

	// The migration Job comes first; the Deployment waits for it.
	cur := e.waitCondition(t, ep, v1alpha1.ConditionDatabaseMigrated, metav1.ConditionFalse, controllers.ReasonMigrating)
	job := &batchv1.Job{}
	g.Expect(e.k8s.Get(e.ctx, key(ns, resources.MigrationJobName(ep)), job)).To(Succeed())
	g.Expect(job.Spec.Template.Spec.Containers[0].Args).To(Equal([]string{"migrate"}))
	g.Expect(job.Spec.Template.Spec.Containers[0].Image).To(Equal(testImage))
	g.Expect(condition(cur, v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionFalse))
	g.Expect(condition(cur, v1alpha1.ConditionReconciling).Status).To(Equal(metav1.ConditionTrue))
	err := e.k8s.Get(e.ctx, key(ns, resources.ReceiverName(ep)), &appsv1.Deployment{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no Deployment before the migration completed: %v", err)

	e.completeJob(t, ep)
	e.waitCondition(t, ep, v1alpha1.ConditionDatabaseMigrated, metav1.ConditionTrue, controllers.ReasonMigrated)
	cur = e.waitCondition(t, ep, v1alpha1.ConditionReceiverAvailable, metav1.ConditionFalse, controllers.ReasonRollingOut)
	g.Expect(condition(cur, v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionFalse))

	d := &appsv1.Deployment{}
	svc := &corev1.Service{}
	sa := &corev1.ServiceAccount{}
	pdb := &policyv1.PodDisruptionBudget{}
	np := &networkingv1.NetworkPolicy{}
	name := resources.ReceiverName(ep)
	for _, obj := range []client.Object{d, svc, sa, pdb, np} {
		g.Expect(e.k8s.Get(e.ctx, key(ns, name), obj)).To(Succeed(), "%T", obj)
		ownedBy(t, obj, cur)
	}
	ownedBy(t, job, cur)
	g.Expect(*d.Spec.Replicas).To(Equal(int32(2)))
	g.Expect(*d.Spec.Template.Spec.AutomountServiceAccountToken).To(BeFalse())
	g.Expect(*sa.AutomountServiceAccountToken).To(BeFalse())
	g.Expect(configHash(d)).To(HaveLen(64))
	g.Expect(pdb.Spec.MaxUnavailable.IntValue()).To(Equal(1))

	e.makeAvailable(t, ep)
	cur = e.waitCondition(t, ep, v1alpha1.ConditionReady, metav1.ConditionTrue, controllers.ReasonReady)
	g.Expect(cur.Status.URL).To(Equal("http://orders-receiver." + ns + ".svc/stripe"))
	g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
	g.Expect(cur.Status.ActiveSecrets).To(Equal(int32(1)))
	g.Expect(cur.Status.SchemaVersion).To(BeNumerically(">", 0))
	g.Expect(meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionReconciling)).To(BeNil())
	g.Expect(meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionStalled)).To(BeNil())

	// Events tell the story.
	g.Eventually(func(g Gomega) {
		var list eventsv1.EventList
		g.Expect(e.k8s.List(e.ctx, &list, client.InNamespace(ns))).To(Succeed())
		var reasons []string
		for _, ev := range list.Items {
			reasons = append(reasons, ev.Reason)
		}
		g.Expect(reasons).To(ContainElements(controllers.EventMigrationStarted, controllers.EventMigrationSucceeded,
			controllers.EventReceiverAvailable))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

	// A finished Job of an earlier schema version is removed once the current one is done.
	oldJob := job.DeepCopy()
	oldJob.ObjectMeta = metav1.ObjectMeta{
		Name: "orders-migrate-v0", Namespace: ns, OwnerReferences: job.OwnerReferences,
		Labels: resources.Labels(ep, resources.ComponentMigration),
	}
	oldJob.Spec.Selector, oldJob.Spec.ManualSelector = nil, nil
	oldJob.Spec.Template.Labels = resources.Labels(ep, resources.ComponentMigration)
	oldJob.Status = batchv1.JobStatus{}
	g.Expect(e.k8s.Create(e.ctx, oldJob)).To(Succeed())
	e.touch(t, ep)
	e.expectGone(g, key(ns, "orders-migrate-v0"), &batchv1.Job{})
	g.Expect(e.k8s.Get(e.ctx, key(ns, resources.MigrationJobName(ep)), &batchv1.Job{})).To(Succeed())

	// A reconcile with nothing changed writes nothing. The manager may still be finishing
	// the reconcile the Job's deletion queued (a label patch does not bump the generation
	// touch waits on), so the check is retried until that one is done; a reconcile that
	// writes every time never passes.
	g.Eventually(func(g Gomega) {
		before := e.resourceVersions(t, ep)
		e.reconcileNow(t, ep)
		e.reconcileNow(t, ep)
		g.Expect(e.resourceVersions(t, ep)).To(Equal(before))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

	// One replica: no PodDisruptionBudget.
	e.updateEndpoint(g, ep, func(cur *v1alpha1.WebhookEndpoint) { cur.Spec.Receiver.Replicas = ptr.To[int32](1) })
	e.expectGone(g, key(ns, name), &policyv1.PodDisruptionBudget{})

	// Deleting the endpoint: envtest runs no garbage collector, so the owner references
	// checked above (controller, blockOwnerDeletion) are what makes the cluster's GC
	// remove the owned objects. Here: the endpoint itself goes without a finalizer.
	g.Expect(e.k8s.Delete(e.ctx, cur)).To(Succeed())
	e.expectGone(g, client.ObjectKeyFromObject(ep), &v1alpha1.WebhookEndpoint{})
}

// resourceVersions of the endpoint and every object it owns.
// settled returns resourceVersions once they stay the same for a second: the manager's
// workers (controllers.EndpointWorkers) may still be writing the status of a reconcile
// the last change started, which a direct reconcile must not be blamed for.
func (e *env) settled(t *testing.T, ep *v1alpha1.WebhookEndpoint) map[string]string {
	t.Helper()
	var last map[string]string
	var since time.Time
	NewWithT(t).Eventually(func(g Gomega) {
		cur := e.resourceVersions(t, ep)
		if !maps.Equal(cur, last) {
			last, since = cur, time.Now()
		}
		g.Expect(time.Since(since)).To(BeNumerically(">=", time.Second))
	}).WithTimeout(timeout).WithPolling(100 * time.Millisecond).Should(Succeed())
	return last
}

func (e *env) resourceVersions(t *testing.T, ep *v1alpha1.WebhookEndpoint) map[string]string {
	t.Helper()
	out := map[string]string{}
	name := resources.ReceiverName(ep)
	for label, obj := range map[string]client.Object{
		"endpoint":       &v1alpha1.WebhookEndpoint{ObjectMeta: metav1.ObjectMeta{Name: ep.Name, Namespace: ep.Namespace}},
		"job":            &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: resources.MigrationJobName(ep), Namespace: ep.Namespace}},
		"deployment":     &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ep.Namespace}},
		"service":        &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ep.Namespace}},
		"serviceaccount": &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ep.Namespace}},
		"pdb":            &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ep.Namespace}},
		"networkpolicy":  &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ep.Namespace}},
	} {
		if err := e.k8s.Get(e.ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Fatalf("get %s: %v", label, err)
		}
		out[label] = obj.GetResourceVersion()
	}
	return out
}

func (e *env) noReceiverObjects(t *testing.T, ep *v1alpha1.WebhookEndpoint) {
	t.Helper()
	for _, obj := range []client.Object{&appsv1.Deployment{}, &batchv1.Job{}} {
		name := resources.ReceiverName(ep)
		if _, ok := obj.(*batchv1.Job); ok {
			name = resources.MigrationJobName(ep)
		}
		if err := e.k8s.Get(e.ctx, key(ep.Namespace, name), obj); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s exists (err %v); nothing may run before the config and Secrets are good", obj, name, err)
		}
	}
}

func (e *env) testInvalidConfig(t *testing.T) {
	ns := e.namespaceWithSecrets(t)
	ep := validEndpoint(ns, "bad-cel")
	ep.Spec.Event.EntityKey = "body.data.object.metadata.client_txn_id +"
	e.create(t, ep)
	cur := e.waitCondition(t, ep, v1alpha1.ConditionConfigValid, metav1.ConditionFalse, controllers.ReasonInvalidConfig)
	msg := condition(cur, v1alpha1.ConditionConfigValid).Message
	if !strings.Contains(msg, "spec.event.entityKey") {
		t.Errorf("message %q does not name the field", msg)
	}
	if c := condition(cur, v1alpha1.ConditionReady); c.Status != metav1.ConditionFalse || c.Reason != controllers.ReasonInvalidConfig {
		t.Errorf("Ready = %+v", c)
	}
	if c := condition(cur, v1alpha1.ConditionStalled); c.Status != metav1.ConditionTrue {
		t.Errorf("Stalled = %+v", c)
	}
	e.noReceiverObjects(t, ep)
}

func (e *env) testMissingSecret(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespace(t)
	e.secret(t, ns, "stripe", map[string]string{"previous": "whsec_previous"})
	ep := e.create(t, validEndpoint(ns, "no-key"))

	cur := e.waitCondition(t, ep, v1alpha1.ConditionSecretsResolved, metav1.ConditionFalse, controllers.ReasonKeyNotFound)
	msg := condition(cur, v1alpha1.ConditionSecretsResolved).Message
	g.Expect(msg).To(ContainSubstring("Secret " + ns + "/stripe has no key \"current\""))
	g.Expect(msg).To(ContainSubstring("spec.signingSecrets[0].secretKeyRef"))
	g.Expect(msg).NotTo(ContainSubstring("whsec_"))
	e.noReceiverObjects(t, ep)

	// Fixing the key (a Secret event, through the field index) moves on to the next
	// missing piece: the database Secret does not exist at all.
	s := &corev1.Secret{}
	g.Expect(e.k8s.Get(e.ctx, key(ns, "stripe"), s)).To(Succeed())
	s.Data["current"] = []byte("whsec_current")
	g.Expect(e.k8s.Update(e.ctx, s)).To(Succeed())
	cur = e.waitCondition(t, ep, v1alpha1.ConditionSecretsResolved, metav1.ConditionFalse, controllers.ReasonSecretNotFound)
	g.Expect(condition(cur, v1alpha1.ConditionSecretsResolved).Message).To(
		ContainSubstring("Secret " + ns + "/db-app not found (referenced by spec.database.urlSecretRef)"))
	e.noReceiverObjects(t, ep)

	e.secret(t, ns, "db-app", map[string]string{"uri": "postgres://db/app"})
	e.waitCondition(t, ep, v1alpha1.ConditionSecretsResolved, metav1.ConditionTrue, controllers.ReasonResolved)
	e.waitCondition(t, ep, v1alpha1.ConditionDatabaseMigrated, metav1.ConditionFalse, controllers.ReasonMigrating)
}

func (e *env) deployment(g Gomega, ep *v1alpha1.WebhookEndpoint) *appsv1.Deployment {
	d := &appsv1.Deployment{}
	g.ExpectWithOffset(1, e.k8s.Get(e.ctx, key(ep.Namespace, resources.ReceiverName(ep)), d)).To(Succeed())
	return d
}

func (e *env) testRotation(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespaceWithSecrets(t)
	e.secret(t, ns, "unrelated", map[string]string{"x": "1"})
	ep := e.ready(t, validEndpoint(ns, "rotate"))
	hash0 := configHash(e.deployment(g, ep))

	// An unrelated Secret and an unreferenced key of a referenced Secret change nothing.
	for _, change := range []struct{ secret, key string }{{"unrelated", "x"}, {"stripe", "previous"}} {
		s := &corev1.Secret{}
		g.Expect(e.k8s.Get(e.ctx, key(ns, change.secret), s)).To(Succeed())
		s.Data[change.key] = []byte("changed")
		g.Expect(e.k8s.Update(e.ctx, s)).To(Succeed())
		before := e.settled(t, ep)
		e.reconcileNow(t, ep)
		g.Expect(configHash(e.deployment(g, ep))).To(Equal(hash0), "changing %s/%s", change.secret, change.key)
		g.Expect(e.resourceVersions(t, ep)).To(Equal(before), "changing %s/%s", change.secret, change.key)
	}

	// Rotating the referenced key rolls the pods, through the Secret watch.
	s := &corev1.Secret{}
	g.Expect(e.k8s.Get(e.ctx, key(ns, "stripe"), s)).To(Succeed())
	s.Data["current"] = []byte("whsec_rotated")
	g.Expect(e.k8s.Update(e.ctx, s)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(configHash(e.deployment(g, ep))).NotTo(Equal(hash0))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	e.waitCondition(t, ep, v1alpha1.ConditionReceiverAvailable, metav1.ConditionFalse, controllers.ReasonRollingOut)
	g.Eventually(func(g Gomega) {
		var list eventsv1.EventList
		g.Expect(e.k8s.List(e.ctx, &list, client.InNamespace(ns))).To(Succeed())
		found := false
		for _, ev := range list.Items {
			found = found || ev.Reason == controllers.EventSecretRotated
			g.Expect(ev.Note).NotTo(ContainSubstring("whsec_"))
		}
		g.Expect(found).To(BeTrue(), "a SecretRotated event")
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
}

func (e *env) testExpiry(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespaceWithSecrets(t)
	ep := validEndpoint(ns, "expiry")
	expiresAt := metav1.NewTime(time.Now().Add(8 * time.Second).Truncate(time.Second))
	ep.Spec.SigningSecrets = []v1alpha1.SigningSecret{
		{SecretKeyRef: keyRef("stripe", "previous"), ExpiresAt: &expiresAt},
		{SecretKeyRef: keyRef("stripe", "current")},
	}
	e.create(t, ep)
	e.completeJob(t, ep)
	var hash0 string
	g.Eventually(func(g Gomega) {
		d := e.deployment(g, ep)
		g.Expect(signingEnv(d)).To(Equal([]string{"HOOKKEEPER_SIGNING_SECRET_0=previous", "HOOKKEEPER_SIGNING_SECRET_1=current"}))
		hash0 = configHash(d)
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	g.Expect(time.Now().Before(expiresAt.Time)).To(BeTrue(), "the setup took longer than the expiry window")

	// Nothing changes the endpoint or its Secrets: only the requeue at expiresAt can
	// drop the secret and renumber the rest.
	g.Eventually(func(g Gomega) {
		d := e.deployment(g, ep)
		g.Expect(signingEnv(d)).To(Equal([]string{"HOOKKEEPER_SIGNING_SECRET_0=current"}))
		g.Expect(configHash(d)).NotTo(Equal(hash0))
		g.Expect(e.endpoint(g, ep).Status.ActiveSecrets).To(Equal(int32(1)))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	g.Expect(time.Now().Before(expiresAt.Time)).To(BeFalse())
}

func (e *env) testMigrationFailure(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespaceWithSecrets(t)
	ep := e.create(t, validEndpoint(ns, "migfail"))
	job := &batchv1.Job{}
	g.Eventually(func() error {
		return e.k8s.Get(e.ctx, key(ns, resources.MigrationJobName(ep)), job)
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

	// Play the Job controller and kubelet: each attempt is a pod that failed with a
	// termination message, counted in the Job's status.failed while it retries.
	refused := "connect to the database: failed to connect to `user=app database=app`: 127.0.0.1:1 (127.0.0.1): dial error: dial tcp 127.0.0.1:1: connect: connection refused"
	start := time.Now()
	failAttempt := func(n int32, message string) {
		t.Helper()
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", job.Name, n), Namespace: ns,
				Labels:          map[string]string{batchv1.JobNameLabel: job.Name, batchv1.ControllerUidLabel: string(job.UID)},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}},
			Spec: *job.Spec.Template.Spec.DeepCopy(),
		}
		g.Expect(e.k8s.Create(e.ctx, pod)).To(Succeed())
		pod.Status.Phase = corev1.PodFailed
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
			Name: "migrate", Image: testImage,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 1, Reason: "Error", Message: message + "\n",
				// Attempts are seconds apart at least (the Job's backoff); timestamps
				// have seconds only.
				FinishedAt: metav1.NewTime(start.Add(time.Duration(n) * time.Minute)),
			}},
		}}
		g.Expect(e.k8s.Status().Update(e.ctx, pod)).To(Succeed())
		g.Expect(e.k8s.Get(e.ctx, client.ObjectKeyFromObject(job), job)).To(Succeed())
		if job.Status.StartTime == nil {
			job.Status.StartTime = ptr.To(metav1.Now())
		}
		job.Status.Failed = n
		job.Status.Active = 1
		g.Expect(e.k8s.Status().Update(e.ctx, job)).To(Succeed())
	}
	attemptEvents := func(g Gomega) []eventsv1.Event {
		var list eventsv1.EventList
		g.Expect(e.k8s.List(e.ctx, &list, client.InNamespace(ns))).To(Succeed())
		var out []eventsv1.Event
		for _, ev := range list.Items {
			if ev.Reason == controllers.EventMigrationAttemptFailed {
				out = append(out, ev)
			}
		}
		return out
	}
	attempts := *job.Spec.BackoffLimit + 1

	failAttempt(1, refused)
	cur := e.waitCondition(t, ep, v1alpha1.ConditionDatabaseMigrated, metav1.ConditionFalse, controllers.ReasonMigrationFailing)
	g.Expect(condition(cur, v1alpha1.ConditionDatabaseMigrated).Message).To(ContainSubstring(
		fmt.Sprintf("attempt 1 of %d failed: %s", attempts, refused)))
	g.Expect(condition(cur, v1alpha1.ConditionReconciling).Status).To(Equal(metav1.ConditionTrue))

	failAttempt(2, refused)
	g.Eventually(func(g Gomega) {
		c := condition(e.endpoint(g, ep), v1alpha1.ConditionDatabaseMigrated)
		g.Expect(c.Reason).To(Equal(controllers.ReasonMigrationFailing))
		g.Expect(c.Message).To(ContainSubstring(fmt.Sprintf("attempt 2 of %d failed: %s", attempts, refused)))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	// One Warning Event per failed attempt...
	g.Eventually(func(g Gomega) {
		var notes []string
		for _, ev := range attemptEvents(g) {
			g.Expect(ev.Type).To(Equal(corev1.EventTypeWarning))
			notes = append(notes, ev.Note)
		}
		g.Expect(notes).To(ConsistOf(
			ContainSubstring(fmt.Sprintf("attempt 1 of %d failed: %s", attempts, refused)),
			ContainSubstring(fmt.Sprintf("attempt 2 of %d failed: %s", attempts, refused))))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	// ...and none from a reconcile that sees no new attempt (the events.k8s.io
	// recorder folds repeats into a series in memory, so watch a recorder directly).
	fake := events.NewFakeRecorder(10)
	e.direct.Recorder = fake
	t.Cleanup(func() { e.direct.Recorder = nil })
	e.reconcileNow(t, ep)
	e.reconcileNow(t, ep)
	g.Expect(fake.Events).To(BeEmpty())
	e.direct.Recorder = nil

	// The Job gives up: the last attempt's message, the count and what to do.
	failAttempt(3, "permission denied for database app")
	g.Expect(e.k8s.Get(e.ctx, client.ObjectKeyFromObject(job), job)).To(Succeed())
	now := metav1.Now()
	job.Status.Active = 0
	job.Status.Conditions = []batchv1.JobCondition{
		{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", LastTransitionTime: now, LastProbeTime: now},
		{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", LastTransitionTime: now, LastProbeTime: now},
	}
	g.Expect(e.k8s.Status().Update(e.ctx, job)).To(Succeed())

	cur = e.waitCondition(t, ep, v1alpha1.ConditionDatabaseMigrated, metav1.ConditionFalse, controllers.ReasonMigrationFailed)
	msg := condition(cur, v1alpha1.ConditionDatabaseMigrated).Message
	g.Expect(msg).To(ContainSubstring("failed after 3 attempts: BackoffLimitExceeded; last attempt: permission denied for database app; fix the cause and delete the Job"))
	g.Expect(msg).To(ContainSubstring(job.Name))
	g.Expect(condition(cur, v1alpha1.ConditionStalled).Status).To(Equal(metav1.ConditionTrue))
	e.noReceiverObjectsExceptJob(t, ep)
}

func (e *env) noReceiverObjectsExceptJob(t *testing.T, ep *v1alpha1.WebhookEndpoint) {
	t.Helper()
	err := e.k8s.Get(e.ctx, key(ep.Namespace, resources.ReceiverName(ep)), &appsv1.Deployment{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("Deployment exists after a failed migration (err %v)", err)
	}
}

func (e *env) testNetworkPolicy(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespaceWithSecrets(t)
	ep := validEndpoint(ns, "fenced")
	ep.Spec.NetworkPolicy = v1alpha1.NetworkPolicySpec{
		Enabled:     ptr.To(true),
		MetricsFrom: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}},
		Egress:      &v1alpha1.EgressSpec{DatabaseCIDRs: []string{"10.0.0.0/24"}, SinkCIDRs: []string{"10.1.0.0/16"}, SinkPorts: []int32{8080}},
	}
	e.ready(t, ep)
	np := &networkingv1.NetworkPolicy{}
	g.Expect(e.k8s.Get(e.ctx, key(ns, resources.ReceiverName(ep)), np)).To(Succeed())
	g.Expect(np.Spec.PolicyTypes).To(ConsistOf(networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress))
	g.Expect(np.Spec.Ingress).To(HaveLen(2))
	g.Expect(np.Spec.Ingress[0].From).To(BeEmpty())
	g.Expect(np.Spec.Ingress[1].From[0].NamespaceSelector.MatchLabels).To(HaveKeyWithValue("kubernetes.io/metadata.name", "monitoring"))
	g.Expect(np.Spec.Egress).To(HaveLen(3))
	g.Expect(np.Spec.Egress[1].To[0].IPBlock.CIDR).To(Equal("10.0.0.0/24"))

	e.updateEndpoint(g, ep, func(cur *v1alpha1.WebhookEndpoint) { cur.Spec.NetworkPolicy.Enabled = ptr.To(false) })
	e.expectGone(g, key(ns, resources.ReceiverName(ep)), &networkingv1.NetworkPolicy{})
}

func (e *env) testIngress(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespaceWithSecrets(t)
	ep := validEndpoint(ns, "ing")
	ep.Spec.Exposure = &v1alpha1.ExposureSpec{Ingress: &v1alpha1.IngressExposure{
		ClassName: "nginx", Host: "hooks.example.com", TLSSecretName: "hooks-tls",
		Annotations: map[string]string{"cert-manager.io/cluster-issuer": "letsencrypt"},
	}}
	e.create(t, ep)
	e.completeJob(t, ep)
	e.makeAvailable(t, ep)
	cur := e.waitCondition(t, ep, v1alpha1.ConditionExposed, metav1.ConditionFalse, controllers.ReasonIngressPending)
	g.Expect(cur.Status.URL).To(Equal("http://ing-receiver." + ns + ".svc/stripe"))
	g.Expect(condition(cur, v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionFalse))

	ing := &networkingv1.Ingress{}
	g.Expect(e.k8s.Get(e.ctx, key(ns, resources.ExposureName(ep)), ing)).To(Succeed())
	ownedBy(t, ing, cur)
	g.Expect(*ing.Spec.IngressClassName).To(Equal("nginx"))
	g.Expect(ing.Annotations).To(HaveKeyWithValue("cert-manager.io/cluster-issuer", "letsencrypt"))
	g.Expect(ing.Spec.TLS[0].SecretName).To(Equal("hooks-tls"))
	path := ing.Spec.Rules[0].HTTP.Paths[0]
	g.Expect(path.Path).To(Equal("/stripe"))
	g.Expect(path.Backend.Service.Port.Name).To(Equal("http"))

	ing.Status.LoadBalancer.Ingress = []networkingv1.IngressLoadBalancerIngress{{IP: "203.0.113.7"}}
	g.Expect(e.k8s.Status().Update(e.ctx, ing)).To(Succeed())
	cur = e.waitCondition(t, ep, v1alpha1.ConditionReady, metav1.ConditionTrue, controllers.ReasonReady)
	g.Expect(cur.Status.URL).To(Equal("https://hooks.example.com/stripe"))
	g.Expect(condition(cur, v1alpha1.ConditionExposed).Reason).To(Equal(controllers.ReasonLoadBalanced))
	g.Expect(e.k8s.Get(e.ctx, key(ns, resources.ExposureName(ep)), ing)).To(Succeed())
	rv := ing.ResourceVersion
	e.reconcileNow(t, ep)
	g.Expect(e.k8s.Get(e.ctx, key(ns, resources.ExposureName(ep)), ing)).To(Succeed())
	g.Expect(ing.ResourceVersion).To(Equal(rv), "Ingress rewritten by a no-op reconcile")

	// Removing the exposure removes the Ingress and the public URL.
	e.removeExposure(t, ep, &networkingv1.Ingress{}, "http://ing-receiver.")
}

// removeExposure clears ep's exposure and waits until the object that exposed it (an
// empty Ingress or HTTPRoute) is gone, the URL is the in-cluster one again (urlPrefix),
// the Exposed condition is removed and the endpoint is Ready.
func (e *env) removeExposure(t *testing.T, ep *v1alpha1.WebhookEndpoint, exposed client.Object, urlPrefix string) {
	t.Helper()
	g := NewWithT(t)
	e.updateEndpoint(g, ep, func(cur *v1alpha1.WebhookEndpoint) { cur.Spec.Exposure = nil })
	g.Eventually(func(g Gomega) {
		g.Expect(apierrors.IsNotFound(e.k8s.Get(e.ctx, key(ep.Namespace, resources.ExposureName(ep)), exposed))).To(BeTrue())
		cur := e.endpoint(g, ep)
		g.Expect(cur.Status.URL).To(HavePrefix(urlPrefix))
		g.Expect(meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionExposed)).To(BeNil())
		g.Expect(condition(cur, v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
}

func monitoringObject(kind, ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(resources.MonitoringGroupVersion.WithKind(kind))
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

func (e *env) testMonitoring(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespaceWithSecrets(t)
	mon := validEndpoint(ns, "mon")
	mon.Spec.Monitoring.Labels = map[string]v1alpha1.LabelValue{"release": "prom-payments", "team": "payments"}
	ep := e.ready(t, mon)
	// Without the CRDs the endpoint is Ready (above) and the kind is not even served.
	err := e.k8s.Get(e.ctx, key(ns, resources.MonitoringName(ep)), monitoringObject("ServiceMonitor", ns, resources.MonitoringName(ep)))
	g.Expect(meta.IsNoMatchError(err)).To(BeTrue(), "ServiceMonitor must not be served yet: %v", err)

	testsupport.InstallCRDs(t, "testdata/monitoring.coreos.com.yaml")
	e.touch(t, ep)
	for _, kind := range []string{"ServiceMonitor", "PrometheusRule"} {
		obj := monitoringObject(kind, ns, resources.MonitoringName(ep))
		g.Eventually(func() error {
			return e.k8s.Get(e.ctx, client.ObjectKeyFromObject(obj), obj)
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed(), kind)
		cur := e.endpoint(g, ep)
		ownedBy(t, obj, cur)
		// The endpoint's labels over the operator-wide ones (testMonitoringLabels), the
		// operator's own labels kept.
		labels := obj.GetLabels()
		g.Expect(labels).To(HaveKeyWithValue("release", "prom-payments"), kind)
		g.Expect(labels).To(HaveKeyWithValue("team", "payments"), kind)
		g.Expect(labels).To(HaveKeyWithValue("tier", "ops"), kind)
		g.Expect(labels).To(HaveKeyWithValue(resources.LabelManagedBy, resources.ManagedBy), kind)
	}

	// Applying the same objects again is a no-op on the server.
	rvs := func() []string {
		var out []string
		for _, kind := range []string{"ServiceMonitor", "PrometheusRule"} {
			obj := monitoringObject(kind, ns, resources.MonitoringName(ep))
			g.Expect(e.k8s.Get(e.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
			out = append(out, obj.GetResourceVersion())
		}
		return out
	}
	before := rvs()
	e.reconcileNow(t, ep)
	g.Expect(rvs()).To(Equal(before))

	// Disabling the ServiceMonitor removes it.
	e.updateEndpoint(g, ep, func(cur *v1alpha1.WebhookEndpoint) { cur.Spec.Monitoring.ServiceMonitor.Enabled = ptr.To(false) })
	obj := monitoringObject("ServiceMonitor", ns, resources.MonitoringName(ep))
	e.expectGone(g, client.ObjectKeyFromObject(obj), obj)
}

func (e *env) testHTTPRoute(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespaceWithSecrets(t)
	ep := validEndpoint(ns, "route")
	ep.Spec.Exposure = &v1alpha1.ExposureSpec{HTTPRoute: &v1alpha1.HTTPRouteExposure{
		ParentRefs: []v1alpha1.ParentReference{{Name: "public", Namespace: "gateways", SectionName: "https"}},
		Hostnames:  []string{"hooks.example.com"},
		Path:       "/hooks/stripe",
	}}
	e.create(t, ep)
	e.completeJob(t, ep)
	e.makeAvailable(t, ep)

	// No Gateway API: a clear reason, not a crash.
	cur := e.waitCondition(t, ep, v1alpha1.ConditionReady, metav1.ConditionFalse, controllers.ReasonGatewayMissing)
	g.Expect(condition(cur, v1alpha1.ConditionExposed).Reason).To(Equal(controllers.ReasonGatewayMissing))
	g.Expect(condition(cur, v1alpha1.ConditionExposed).Message).To(ContainSubstring("Gateway API CRDs"))
	g.Expect(cur.Status.URL).To(HavePrefix("http://route-receiver."))

	testsupport.InstallCRDs(t, gatewayCRDs(t)...)
	e.touch(t, ep)
	cur = e.waitCondition(t, ep, v1alpha1.ConditionExposed, metav1.ConditionFalse, controllers.ReasonRoutePending)
	route := &gatewayv1.HTTPRoute{}
	g.Expect(e.k8s.Get(e.ctx, key(ns, resources.ExposureName(ep)), route)).To(Succeed())
	ownedBy(t, route, cur)
	g.Expect(route.Spec.ParentRefs).To(HaveLen(1))
	parent := route.Spec.ParentRefs[0]
	g.Expect(string(parent.Name)).To(Equal("public"))
	g.Expect(string(*parent.Namespace)).To(Equal("gateways"))
	g.Expect(string(*parent.SectionName)).To(Equal("https"))
	g.Expect(route.Spec.Hostnames).To(Equal([]gatewayv1.Hostname{"hooks.example.com"}))
	rule := route.Spec.Rules[0]
	g.Expect(*rule.Matches[0].Path.Type).To(Equal(gatewayv1.PathMatchPathPrefix))
	g.Expect(*rule.Matches[0].Path.Value).To(Equal("/hooks/stripe"))
	g.Expect(rule.BackendRefs).To(HaveLen(1))
	g.Expect(string(rule.BackendRefs[0].Name)).To(Equal(resources.ReceiverName(ep)))
	g.Expect(*rule.BackendRefs[0].Port).To(Equal(gatewayv1.PortNumber(80)))
	g.Expect(rule.Filters).To(HaveLen(1), "the public prefix is rewritten to the receiver path")
	g.Expect(*rule.Filters[0].URLRewrite.Path.ReplacePrefixMatch).To(Equal("/stripe"))

	// A reconcile with the route in place changes nothing.
	rv := route.ResourceVersion
	e.reconcileNow(t, ep)
	g.Expect(e.k8s.Get(e.ctx, key(ns, resources.ExposureName(ep)), route)).To(Succeed())
	g.Expect(route.ResourceVersion).To(Equal(rv), "HTTPRoute rewritten by a no-op reconcile")

	// The Gateway accepts the route: the public URL.
	route.Status.Parents = []gatewayv1.RouteParentStatus{{
		ParentRef:      parent,
		ControllerName: "example.com/gateway-controller",
		Conditions: []metav1.Condition{{
			Type: string(gatewayv1.RouteConditionAccepted), Status: metav1.ConditionTrue, Reason: "Accepted",
			ObservedGeneration: route.Generation, LastTransitionTime: metav1.Now(),
		}},
	}}
	g.Expect(e.k8s.Status().Update(e.ctx, route)).To(Succeed())
	cur = e.waitCondition(t, ep, v1alpha1.ConditionReady, metav1.ConditionTrue, controllers.ReasonReady)
	g.Expect(cur.Status.URL).To(Equal("https://hooks.example.com/hooks/stripe"))
	g.Expect(condition(cur, v1alpha1.ConditionExposed).Reason).To(Equal(controllers.ReasonAccepted))

	// Removing the exposure removes the route.
	e.removeExposure(t, ep, &gatewayv1.HTTPRoute{}, "http://route-receiver.")
}

// expectGone waits until the object at k no longer exists; obj receives it meanwhile.
func (e *env) expectGone(g Gomega, k client.ObjectKey, obj client.Object) {
	g.Eventually(func() bool { return apierrors.IsNotFound(e.k8s.Get(e.ctx, k, obj)) }).
		WithTimeout(timeout).WithPolling(poll).Should(BeTrue())
}

// updateEndpoint applies mutate to the endpoint as the API server has it now and
// updates it, again on a conflict with the operator's own writes.
func (e *env) updateEndpoint(g Gomega, ep *v1alpha1.WebhookEndpoint, mutate func(*v1alpha1.WebhookEndpoint)) {
	g.Eventually(func(g Gomega) {
		cur := e.endpoint(g, ep)
		mutate(cur)
		g.Expect(e.k8s.Update(e.ctx, cur)).To(Succeed())
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
}

// Rotating the database URL Secret in place rolls the receiver pods (the keyed config
// hash changes) without scaling them down, and the endpoint is Ready again afterwards.
func (e *env) testDatabaseSecretRotationRollsPods(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespaceWithSecrets(t)
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

// testForeignObjectsAreNotTakenOver: an app's own Service and Ingress that happen to
// carry the names the endpoint's would get are left exactly as they were (server-side
// apply with forced ownership would rewrite them, and a controller reference would
// delete them with the endpoint). Ready is False with NotOwned naming the object, the
// endpoint is Stalled, and a Warning Event says the same. Once the app's Service is
// gone, the endpoint creates its own and the reason clears.
func (e *env) testForeignObjectsAreNotTakenOver(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespaceWithSecrets(t)
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
	ns := e.namespaceWithSecrets(t)
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
		g.Expect(ready.Reason).To(Equal(controllers.ReasonWriteRejected), "Ready: %+v", ready)
		g.Expect(ready.Message).To(And(ContainSubstring("network policy: apply NetworkPolicy"),
			ContainSubstring("network policies are frozen in this namespace")))
		// The same write cannot succeed until a person acts: Stalled, so GitOps tools
		// report the endpoint degraded instead of progressing forever.
		g.Expect(condition(cur, v1alpha1.ConditionStalled).Status).To(Equal(metav1.ConditionTrue))
		g.Expect(meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionReconciling)).To(BeNil())
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	e.expectEvent(t, ep, corev1.EventTypeWarning, controllers.ReasonWriteRejected, "network policies are frozen")

	// The admins lift the freeze: the retried step goes through and the reason clears.
	g.Expect(e.k8s.Delete(e.ctx, binding)).To(Succeed())
	g.Eventually(func(g Gomega) {
		e.makeAvailable(t, ep)
		ready := condition(e.endpoint(g, ep), v1alpha1.ConditionReady)
		g.Expect(ready.Reason).NotTo(Equal(controllers.ReasonWriteRejected), "Ready: %+v", ready)
		g.Expect(e.k8s.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: resources.ReceiverName(ep)}, &networkingv1.NetworkPolicy{})).To(Succeed())
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
}

// testScaledToZeroIsNotReady: spec.receiver.replicas 0 is allowed (Minimum 0), but with
// no receiver pod nothing answers the provider: ReceiverAvailable is False with
// ScaledToZero and Ready says so, never "receiving webhooks at ...".
func (e *env) testScaledToZeroIsNotReady(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespaceWithSecrets(t)
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

// testAllSecretsExpired: with every signing secret past its expiresAt the operator
// scales the receiver to zero itself. ReceiverAvailable must say that, not send the
// reader to spec.receiver.replicas (which still says 1), and the Event must not call
// the Secret missing.
func (e *env) testAllSecretsExpired(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespaceWithSecrets(t)
	ep := validEndpoint(ns, "expired")
	past := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	for i := range ep.Spec.SigningSecrets {
		ep.Spec.SigningSecrets[i].ExpiresAt = &past
	}
	ep.Spec.Receiver.Replicas = ptr.To[int32](1)
	ep = e.create(t, ep)
	e.migrated(t, ep)
	g.Eventually(func(g Gomega) {
		var d appsv1.Deployment
		g.Expect(e.k8s.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: resources.ReceiverName(ep)}, &d)).To(Succeed())
		g.Expect(d.Spec.Replicas).To(HaveValue(BeEquivalentTo(0)))
		cur := e.endpoint(g, ep)
		c := condition(cur, v1alpha1.ConditionReceiverAvailable)
		g.Expect(c.Reason).To(Equal(controllers.ReasonAllExpired), "ReceiverAvailable: %+v", c)
		g.Expect(c.Message).To(ContainSubstring("add a current secret"))
		g.Expect(c.Message).NotTo(ContainSubstring("set replicas"))
		g.Expect(condition(cur, v1alpha1.ConditionReady).Reason).To(Equal(controllers.ReasonAllExpired))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(e.eventReasons(g, ns)).To(ContainElement(controllers.EventSecretExpired))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	g.Expect(e.eventReasons(g, ns)).NotTo(ContainElement(controllers.EventSecretMissing))
}

// testImageOverrideNeedsAllowing: spec.receiver.image puts the Secrets the endpoint
// names into a pod running that image, so whoever may edit endpoints could read any
// Secret of the namespace with an image of their own. An image the operator does not
// allow (--allowed-receiver-images) stops the endpoint at ConfigValid, before any Job
// or pod; an allowed one (a prefix entry) runs.
func (e *env) testImageOverrideNeedsAllowing(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespaceWithSecrets(t)
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

// testSecretsNotCached runs after the scenarios above (rotation included, which rolls
// the pods through the Secret watch): through all of them the manager read and watched
// Secrets as metadata only, never as full objects, and the metadata it caches carries no
// annotations (kubectl's last-applied-configuration holds a Secret's data).
func (e *env) testSecretsNotCached(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespace(t)
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "applied", Namespace: ns, Annotations: map[string]string{
			"kubectl.kubernetes.io/last-applied-configuration": `{"apiVersion":"v1","kind":"Secret","data":{"current":"d2hzZWNfbGVhaw=="},"stringData":{"x":"whsec_leak"}}`,
		}},
		Data: map[string][]byte{"current": []byte("whsec_leak")},
	}
	g.Expect(e.k8s.Create(e.ctx, s)).To(Succeed())
	g.Eventually(func(g Gomega) {
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
		g.Expect(e.cache.Get(e.ctx, client.ObjectKeyFromObject(s), m)).To(Succeed())
		g.Expect(m.ResourceVersion).To(Equal(s.ResourceVersion))
		g.Expect(m.Annotations).To(BeEmpty(), "annotations of a Secret in the cache")
		g.Expect(m.ManagedFields).To(BeEmpty(), "managed fields of a Secret in the cache")
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

	full, metadata := e.cacheUse.counts("Secret")
	g.Expect(full).To(BeZero(), "the manager read or watched full Secrets through its cache")
	g.Expect(metadata).To(BeNumerically(">", 0), "the manager watches Secret metadata")
}

// testKeyedHashes: the config hash on the pod template and the migration hash on the Job
// are HMACs under the install's key (a Secret the operator created in its namespace),
// not a plain SHA-256 anyone who can read a Deployment could test guesses against.
func (e *env) testKeyedHashes(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespaceWithSecrets(t)
	ep := e.ready(t, validEndpoint(ns, "keyed"))
	cur := e.endpoint(g, ep)

	keySecret := &corev1.Secret{}
	g.Expect(e.k8s.Get(e.ctx, key(controllers.DefaultKeyNamespace, controllers.HashKeySecretName), keySecret)).To(Succeed())
	hashKey := keySecret.Data["key"]
	g.Expect(hashKey).To(HaveLen(resources.HashKeyBytes))
	g.Expect(keySecret.Immutable).To(HaveValue(BeTrue()))

	rendered, err := resources.Render(cur, time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	values := map[string][]byte{"stripe/current": []byte("whsec_current"), "db-app/uri": []byte("postgres://app@db.example:5432/app")}
	got := configHash(e.deployment(g, ep))
	g.Expect(got).To(Equal(resources.ConfigHash(hashKey, rendered, values)), "config hash keyed by the install's key")
	parts := [][]byte{rendered.JSON}
	for _, ref := range rendered.Refs {
		id := ref.Name + "/" + ref.Key
		parts = append(parts, []byte(ref.EnvVar), []byte(id), values[id])
	}
	g.Expect(got).NotTo(Equal(testsupport.UnkeyedHash(8, parts...)), "config hash is the plain SHA-256 of config and secret values")
	for _, v := range values {
		sum := sha256.Sum256(v)
		g.Expect(got).NotTo(Equal(hex.EncodeToString(sum[:])))
	}

	job := &batchv1.Job{}
	g.Expect(e.k8s.Get(e.ctx, key(ns, resources.MigrationJobName(ep)), job)).To(Succeed())
	migration := job.Annotations[resources.AnnotationMigrationHash]
	db := cur.Spec.Database
	g.Expect(migration).To(Equal(resources.MigrationHash(hashKey, cur, resources.Options{Image: testImage}, values["db-app/uri"])))
	g.Expect(migration).NotTo(Equal(testsupport.UnkeyedHash(4, []byte(db.Schema), []byte(testImage),
		[]byte(db.URLSecretRef.Name), []byte(db.URLSecretRef.Key), values["db-app/uri"])),
		"migration hash is the plain SHA-256 of the database URL")

	// The migration hash still moves with the database URL: a new URL runs the
	// migration again (and the pods roll once it completed).
	s := &corev1.Secret{}
	g.Expect(e.k8s.Get(e.ctx, key(ns, "db-app"), s)).To(Succeed())
	newURL := []byte("postgres://app@db2.example:5432/app")
	s.Data["uri"] = newURL
	g.Expect(e.k8s.Update(e.ctx, s)).To(Succeed())
	g.Eventually(func(g Gomega) {
		job := &batchv1.Job{}
		g.Expect(e.k8s.Get(e.ctx, key(ns, resources.MigrationJobName(ep)), job)).To(Succeed())
		g.Expect(job.Annotations[resources.AnnotationMigrationHash]).To(
			Equal(resources.MigrationHash(hashKey, cur, resources.Options{Image: testImage}, newURL)))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	e.completeJob(t, ep)
	values["db-app/uri"] = newURL
	g.Eventually(func(g Gomega) {
		g.Expect(configHash(e.deployment(g, ep))).To(Equal(resources.ConfigHash(hashKey, rendered, values)))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	g.Expect(resources.ConfigHash(hashKey, rendered, values)).NotTo(Equal(got))
}

// testKeyNamesStayPrivate: a missing key is reported by its own name only; the other
// keys of the Secret (whose names can say what it holds) appear neither in status nor
// in Events.
func (e *env) testKeyNamesStayPrivate(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespace(t)
	e.secret(t, ns, "stripe", map[string]string{"previous": "whsec_previous", "prod-admin-api-token": "rk_live_x"})
	e.secret(t, ns, "db-app", map[string]string{"uri": "postgres://db/app"})
	ep := e.create(t, validEndpoint(ns, "key-names"))

	cur := e.waitCondition(t, ep, v1alpha1.ConditionSecretsResolved, metav1.ConditionFalse, controllers.ReasonKeyNotFound)
	msg := condition(cur, v1alpha1.ConditionSecretsResolved).Message
	g.Expect(msg).To(ContainSubstring(`has no key "current"`))
	for _, other := range []string{"previous", "prod-admin-api-token"} {
		g.Expect(msg).NotTo(ContainSubstring(other), "status names another key of the Secret")
		for _, c := range cur.Status.Conditions {
			g.Expect(c.Message).NotTo(ContainSubstring(other), "condition %s", c.Type)
		}
	}
	g.Eventually(func(g Gomega) {
		var list eventsv1.EventList
		g.Expect(e.k8s.List(e.ctx, &list, client.InNamespace(ns))).To(Succeed())
		found := false
		for _, ev := range list.Items {
			if ev.Reason != controllers.EventSecretMissing {
				continue
			}
			found = true
			g.Expect(ev.Note).To(ContainSubstring(`has no key "current"`))
			g.Expect(strings.Contains(ev.Note, "previous") || strings.Contains(ev.Note, "prod-admin-api-token")).
				To(BeFalse(), "Event names another key of the Secret: %s", ev.Note)
		}
		g.Expect(found).To(BeTrue(), "a SecretMissing event")
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
}

// testMigrationSkippedWhenCurrent: on a database whose schema is already at this
// operator's version the endpoint counts as migrated without a Job and its receivers
// start; a schema behind, or a receiver image of another version, still gets its Job;
// a second endpoint on a schema whose Job runs waits for that Job and runs none.
func (e *env) testMigrationSkippedWhenCurrent(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespace(t)
	dbURL := testsupport.MigratedDatabase(t, v1alpha1.DefaultSchema)
	// A schema an older hookkeeper migrated to version 1.
	conn, err := pgx.Connect(e.ctx, dbURL)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = conn.Close(e.ctx) }()
	_, err = conn.Exec(e.ctx, `CREATE SCHEMA behind;
CREATE TABLE behind.goose_db_version (id serial PRIMARY KEY, version_id bigint NOT NULL, is_applied boolean NOT NULL, tstamp timestamp DEFAULT now());
INSERT INTO behind.goose_db_version (version_id, is_applied) VALUES (0, true), (1, true)`)
	g.Expect(err).NotTo(HaveOccurred())
	e.secret(t, ns, "stripe", map[string]string{"current": "whsec_current"})
	e.secret(t, ns, "db-app", map[string]string{"uri": dbURL})

	current := e.create(t, validEndpoint(ns, "current"))
	cur := e.waitCondition(t, current, v1alpha1.ConditionDatabaseMigrated, metav1.ConditionTrue, controllers.ReasonMigrated)
	g.Expect(condition(cur, v1alpha1.ConditionDatabaseMigrated).Message).To(ContainSubstring("no Job needed"))
	g.Expect(cur.Status.SchemaVersion).To(Equal(store.SchemaVersion))
	err = e.k8s.Get(e.ctx, key(ns, resources.MigrationJobName(current)), &batchv1.Job{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no migration Job for a schema at this version: %v", err)
	g.Eventually(func() error {
		return e.k8s.Get(e.ctx, key(ns, resources.ReceiverName(current)), &appsv1.Deployment{})
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

	behind := validEndpoint(ns, "behind")
	behind.Spec.Database.Schema = "behind"
	pinned := validEndpoint(ns, "pinned")
	pinned.Spec.Receiver.Image = "registry.example/hookkeeper-receiver:v9.9.9"
	for _, ep := range []*v1alpha1.WebhookEndpoint{behind, pinned} {
		e.create(t, ep)
		e.waitCondition(t, ep, v1alpha1.ConditionDatabaseMigrated, metav1.ConditionFalse, controllers.ReasonMigrating)
		g.Expect(e.k8s.Get(e.ctx, key(ns, resources.MigrationJobName(ep)), &batchv1.Job{})).To(Succeed(), ep.Name)
	}

	// Another endpoint on the schema behind's Job migrates waits for that Job.
	second := validEndpoint(ns, "behind-too")
	second.Spec.Database.Schema = "behind"
	e.create(t, second)
	cur = e.waitCondition(t, second, v1alpha1.ConditionDatabaseMigrated, metav1.ConditionFalse, controllers.ReasonMigrating)
	g.Expect(condition(cur, v1alpha1.ConditionDatabaseMigrated).Message).To(ContainSubstring(
		"migration Job " + resources.MigrationJobName(behind) + ", which migrates the same schema"))
	err = e.k8s.Get(e.ctx, key(ns, resources.MigrationJobName(second)), &batchv1.Job{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no second Job while one migrates the schema: %v", err)
	// That Job migrates the schema and completes: the waiting endpoint finds it current.
	_, err = conn.Exec(e.ctx, `INSERT INTO behind.goose_db_version (version_id, is_applied) VALUES ($1, true)`, store.SchemaVersion)
	g.Expect(err).NotTo(HaveOccurred())
	e.completeJob(t, behind)
	cur = e.waitCondition(t, second, v1alpha1.ConditionDatabaseMigrated, metav1.ConditionTrue, controllers.ReasonMigrated)
	g.Expect(condition(cur, v1alpha1.ConditionDatabaseMigrated).Message).To(ContainSubstring("no Job needed"))
	err = e.k8s.Get(e.ctx, key(ns, resources.MigrationJobName(second)), &batchv1.Job{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no Job after the other completed: %v", err)
}

// An endpoint whose receiver replicas are unavailable says what holds its pods back,
// in the order a person fixes it: the scheduler's words, the image that cannot be
// pulled, the crash and its last termination message, or readiness; not a generic
// "check the pods".
func (e *env) testReceiverPodsCause(t *testing.T) {
	g := NewWithT(t)
	ns := e.namespaceWithSecrets(t)
	ep := e.create(t, validEndpoint(ns, "podcause"))
	e.completeJob(t, ep)
	e.waitCondition(t, ep, v1alpha1.ConditionDatabaseMigrated, metav1.ConditionTrue, controllers.ReasonMigrated)

	// Play the Deployment controller: every replica created, none available.
	d := &appsv1.Deployment{}
	g.Eventually(func(g Gomega) {
		g.Expect(e.k8s.Get(e.ctx, key(ns, resources.ReceiverName(ep)), d)).To(Succeed())
		n := *d.Spec.Replicas
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n}
		g.Expect(e.k8s.Status().Update(e.ctx, d)).To(Succeed())
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

	// Play the scheduler and the kubelet on two pods of the Deployment.
	pods := make([]*corev1.Pod, 2)
	for i := range pods {
		pods[i] = &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: d.Name + "-", Namespace: ns, Labels: d.Spec.Template.Labels},
			Spec:       *d.Spec.Template.Spec.DeepCopy(),
		}
		g.Expect(e.k8s.Create(e.ctx, pods[i])).To(Succeed())
	}
	setStatus := func(pod *corev1.Pod, status corev1.PodStatus) {
		t.Helper()
		g.Expect(e.k8s.Get(e.ctx, key(ns, pod.Name), pod)).To(Succeed())
		pod.Status = status
		g.Expect(e.k8s.Status().Update(e.ctx, pod)).To(Succeed())
	}
	expect := func(reason string, parts ...string) {
		t.Helper()
		e.reconcileNow(t, ep)
		c := condition(e.endpoint(g, ep), v1alpha1.ConditionReceiverAvailable)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(reason), c.Message)
		for _, p := range parts {
			g.Expect(c.Message).To(ContainSubstring(p))
		}
		g.Expect(c.Message).NotTo(ContainSubstring("\n"))
	}
	now := metav1.Now()
	running := func(cs corev1.ContainerStatus) corev1.PodStatus {
		return corev1.PodStatus{
			Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now},
			},
			ContainerStatuses: []corev1.ContainerStatus{cs},
		}
	}
	image := d.Spec.Template.Spec.Containers[0].Image

	// Neither pod has a status yet: the Deployment's own words.
	expect(controllers.ReasonUnavailable, "0 of 2 replicas available")

	setStatus(pods[0], running(corev1.ContainerStatus{Name: "receiver", Image: image,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff",
			Message: "Back-off pulling image \"" + image + "\""}}}))
	expect(controllers.ReasonImagePull, "1 of 2 receiver pod(s) cannot pull image "+image, pods[0].Name, "ImagePullBackOff")

	// Unschedulable comes first: nothing else can be fixed on a pod with no node.
	setStatus(pods[1], corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, LastTransitionTime: now,
		Message: "0/1 nodes are available: 1 Insufficient cpu.\npreemption: 0/1 nodes are available",
	}}})
	expect(controllers.ReasonUnschedulable, "1 of 2 receiver pod(s) cannot be scheduled", pods[1].Name, "1 Insufficient cpu. preemption")

	crash := corev1.ContainerStatus{Name: "receiver", Image: image, RestartCount: 4,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 1, Reason: "Error", Message: "open database: connect: connection refused\n"}}}
	setStatus(pods[0], running(crash))
	setStatus(pods[1], running(crash))
	expect(controllers.ReasonCrashLooping, "2 of 2 receiver pod(s) keep crashing", "restarted 4 times, last exit code 1: open database: connect: connection refused")

	ready := corev1.ContainerStatus{Name: "receiver", Image: image, Ready: false,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}
	setStatus(pods[0], running(ready))
	setStatus(pods[1], running(ready))
	expect(controllers.ReasonNotReady, "2 of 2 receiver pod(s) run but are not ready", "/readyz")

	// Nothing but the pods changes, and nothing asks for a reconcile: the operator, which
	// watches no Pods, still finds the crash loop within seconds, not at its idle
	// re-check minutes later.
	setStatus(pods[0], running(crash))
	setStatus(pods[1], running(crash))
	g.Eventually(func(g Gomega) {
		c := condition(e.endpoint(g, ep), v1alpha1.ConditionReceiverAvailable)
		g.Expect(c.Reason).To(Equal(controllers.ReasonCrashLooping), c.Message)
	}).WithTimeout(20 * time.Second).WithPolling(poll).Should(Succeed())
}
