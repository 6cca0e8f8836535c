package controllers_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/zap/zapcore"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/controllers"
	"github.com/hookkeeper/hookkeeper/internal/resources"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

func TestMain(m *testing.M) { testsupport.Main(m) }

const (
	testImage = "hookkeeper:test"
	timeout   = 30 * time.Second
	poll      = 100 * time.Millisecond
)

// testAllowedImages are the image overrides the test operator runs (--allowed-receiver-images).
var testAllowedImages = []string{"registry.example/hookkeeper-receiver:*"}

// env is the shared fixture: one kube-apiserver and one running manager for the package.
type env struct {
	ctx    context.Context
	k8s    client.Client // direct, uncached: what a user sees
	scheme *runtime.Scheme
	// direct reconciles synchronously with an uncached client, for assertions that a
	// reconcile happened and changed nothing.
	direct *controllers.WebhookEndpointReconciler
	// cache is the running manager's cache; cacheUse records what went through it.
	cache    cache.Cache
	cacheUse *cacheRecorder
}

// cacheRecorder wraps the manager's cache and records every kind read or watched
// through it, split into full objects and metadata-only (PartialObjectMetadata).
type cacheRecorder struct {
	mu       sync.Mutex
	full     map[string]int
	metadata map[string]int
}

func (r *cacheRecorder) newCache(cfg *rest.Config, opts cache.Options) (cache.Cache, error) {
	c, err := cache.New(cfg, opts)
	if err != nil {
		return nil, err
	}
	return &recordingCache{Cache: c, rec: r, scheme: opts.Scheme}, nil
}

func (r *cacheRecorder) record(obj runtime.Object, scheme *runtime.Scheme) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.full == nil {
		r.full, r.metadata = map[string]int{}, map[string]int{}
	}
	switch obj.(type) {
	case *metav1.PartialObjectMetadata, *metav1.PartialObjectMetadataList:
		r.metadata[strings.TrimSuffix(obj.GetObjectKind().GroupVersionKind().Kind, "List")]++
		return
	}
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err != nil {
		r.full[fmt.Sprintf("%T", obj)]++
		return
	}
	r.full[strings.TrimSuffix(gvk.Kind, "List")]++
}

func (r *cacheRecorder) counts(kind string) (full, metadata int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.full[kind], r.metadata[kind]
}

type recordingCache struct {
	cache.Cache
	rec    *cacheRecorder
	scheme *runtime.Scheme
}

func (c *recordingCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.rec.record(obj, c.scheme)
	return c.Cache.Get(ctx, key, obj, opts...)
}

func (c *recordingCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	c.rec.record(list, c.scheme)
	return c.Cache.List(ctx, list, opts...)
}

func (c *recordingCache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	c.rec.record(obj, c.scheme)
	return c.Cache.GetInformer(ctx, obj, opts...)
}

func (c *recordingCache) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...cache.InformerGetOption) (cache.Informer, error) {
	c.rec.mu.Lock()
	if c.rec.full == nil {
		c.rec.full, c.rec.metadata = map[string]int{}, map[string]int{}
	}
	c.rec.full[gvk.Kind]++
	c.rec.mu.Unlock()
	return c.Cache.GetInformerForKind(ctx, gvk, opts...)
}

// testMonitoringLabels are the operator-wide labels of the test operator, as
// --monitoring-labels would set them.
var testMonitoringLabels = map[string]string{"release": "kube-prometheus-stack", "tier": "ops"}

// startAPIServer starts envtest's API server with the CRDs installed and returns its
// config, a scheme with every kind the operator uses, and a client on both.
func startAPIServer(t *testing.T) (*rest.Config, *runtime.Scheme, client.Client) {
	t.Helper()
	cfg := testsupport.StartEnvtest(t)
	scheme := runtime.NewScheme()
	if err := controllers.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	k8s, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cfg, scheme, k8s
}

func startEnv(t *testing.T) *env {
	t.Helper()
	// Errors only: the reconciler's expected conflicts and retries are not news.
	logf.SetLogger(zap.New(zap.UseDevMode(true), zap.Level(zapcore.ErrorLevel)))
	cfg, scheme, k8s := startAPIServer(t)
	// The manager's cache and client options are the production ones; the cache is
	// wrapped to record which kinds the manager reads and watches through it.
	recorder := &cacheRecorder{}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:   scheme,
		Cache:    controllers.CacheOptions(),
		Client:   controllers.ClientOptions(),
		NewCache: recorder.newCache,
		// TestInstalledRBAC runs RunInProcess's manager in this process too, with the
		// same controller name.
		Controller:             ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := controllers.Setup(mgr, controllers.Options{ReceiverImage: testImage, AllowedImages: testAllowedImages, MonitoringLabels: testMonitoringLabels}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	manager := testsupport.Run(t, ctx, "manager", time.Minute, mgr.Start)
	t.Cleanup(func() {
		if err := manager.Stop(t); err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	return &env{
		ctx: ctx, k8s: k8s, scheme: scheme, cache: mgr.GetCache(), cacheUse: recorder,
		direct: &controllers.WebhookEndpointReconciler{
			Client: k8s, Scheme: scheme, Options: controllers.Options{ReceiverImage: testImage, AllowedImages: testAllowedImages, MonitoringLabels: testMonitoringLabels},
		},
	}
}

func randomName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

func (e *env) namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: randomName("hk")}}
	if err := e.k8s.Create(e.ctx, ns); err != nil {
		t.Fatal(err)
	}
	// envtest has no namespace controller: deleting marks the namespace Terminating and
	// leaves its objects in the throwaway etcd, which is fine.
	t.Cleanup(func() { _ = e.k8s.Delete(context.Background(), ns) })
	return ns.Name
}

func (e *env) secret(t *testing.T, ns, name string, data map[string]string) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	if err := e.k8s.Create(e.ctx, s); err != nil {
		t.Fatal(err)
	}
	return s
}

func keyRef(name, key string) corev1.SecretKeySelector {
	return corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
}

// namespaceWithSecrets creates a namespace with the Secrets a validEndpoint references.
func (e *env) namespaceWithSecrets(t *testing.T) string {
	t.Helper()
	ns := e.namespace(t)
	e.secret(t, ns, "stripe", map[string]string{"current": "whsec_current", "previous": "whsec_previous"})
	e.secret(t, ns, "db-app", map[string]string{"uri": "postgres://app@db.example:5432/app"})
	return ns
}

func validEndpoint(ns, name string) *v1alpha1.WebhookEndpoint {
	return &v1alpha1.WebhookEndpoint{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.WebhookEndpointSpec{
			Provider:       v1alpha1.ProviderSpec{Type: v1alpha1.ProviderStripe},
			SigningSecrets: []v1alpha1.SigningSecret{{SecretKeyRef: keyRef("stripe", "current")}},
			Event:          v1alpha1.EventSpec{EntityKey: "body.data.object.metadata.client_txn_id"},
			Database:       v1alpha1.DatabaseSpec{URLSecretRef: keyRef("db-app", "uri")},
			StateMachine: v1alpha1.StateMachineSpec{
				Initial: "payment_pending",
				States:  []string{"payment_pending", "paid"},
				Transitions: []v1alpha1.Transition{{
					Name: "capture", On: []string{"payment_intent.succeeded"},
					From: []string{"payment_pending"}, To: "paid",
				}},
			},
			Delivery: v1alpha1.DeliverySpec{Sink: v1alpha1.SinkSpec{URL: "http://fulfilment.shop.svc:8080/events"}},
			Receiver: v1alpha1.ReceiverSpec{Replicas: ptr.To[int32](2), Path: "/stripe"},
		},
	}
}

func (e *env) create(t *testing.T, ep *v1alpha1.WebhookEndpoint) *v1alpha1.WebhookEndpoint {
	t.Helper()
	if err := e.k8s.Create(e.ctx, ep); err != nil {
		t.Fatal(err)
	}
	return ep
}

// endpoint fetches the current endpoint.
func (e *env) endpoint(g Gomega, ep *v1alpha1.WebhookEndpoint) *v1alpha1.WebhookEndpoint {
	cur := &v1alpha1.WebhookEndpoint{}
	g.ExpectWithOffset(1, e.k8s.Get(e.ctx, client.ObjectKeyFromObject(ep), cur)).To(Succeed())
	return cur
}

func condition(ep *v1alpha1.WebhookEndpoint, t string) metav1.Condition {
	for _, c := range ep.Status.Conditions {
		if c.Type == t {
			return c
		}
	}
	return metav1.Condition{Type: t, Status: "Absent"}
}

// waitCondition waits until the endpoint's condition has status and reason and returns
// the endpoint as it was then.
func (e *env) waitCondition(t *testing.T, ep *v1alpha1.WebhookEndpoint, condType string, status metav1.ConditionStatus, reason string) *v1alpha1.WebhookEndpoint {
	t.Helper()
	var cur *v1alpha1.WebhookEndpoint
	NewWithT(t).Eventually(func(g Gomega) {
		cur = e.endpoint(g, ep)
		c := condition(cur, condType)
		g.Expect(c.Status).To(Equal(status), "condition %s: %+v", condType, c)
		g.Expect(c.Reason).To(Equal(reason), "condition %s: %+v", condType, c)
		g.Expect(c.ObservedGeneration).To(Equal(cur.Generation))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	return cur
}

func key(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }

// completeJob plays the Job controller: the migration Job succeeded.
func (e *env) completeJob(t *testing.T, ep *v1alpha1.WebhookEndpoint) {
	t.Helper()
	job := &batchv1.Job{}
	NewWithT(t).Eventually(func() error {
		return e.k8s.Get(e.ctx, key(ep.Namespace, resources.MigrationJobName(ep)), job)
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	if err := e.markComplete(job); err != nil {
		t.Fatalf("complete Job: %v", err)
	}
}

// markComplete records job as succeeded, as the Job controller would.
func (e *env) markComplete(job *batchv1.Job) error {
	now := metav1.Now()
	job.Status.StartTime = &now
	job.Status.CompletionTime = &now
	job.Status.Succeeded = 1
	job.Status.Conditions = []batchv1.JobCondition{
		{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now, LastProbeTime: now},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now, LastProbeTime: now},
	}
	return e.k8s.Status().Update(e.ctx, job)
}

func jobComplete(job *batchv1.Job) bool {
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// migrated waits until the endpoint's schema counts as migrated, playing the Job
// controller if the operator made a migration Job. On a database the operator finds
// already migrated (testsupport.MigratedDatabase) it makes none.
// eventReasons lists the reasons of the Events in namespace ns.
func (e *env) eventReasons(g Gomega, ns string) []string {
	var list eventsv1.EventList
	g.Expect(e.k8s.List(e.ctx, &list, client.InNamespace(ns))).To(Succeed())
	reasons := make([]string, 0, len(list.Items))
	for _, ev := range list.Items {
		reasons = append(reasons, ev.Reason)
	}
	return reasons
}

func (e *env) migrated(t *testing.T, ep *v1alpha1.WebhookEndpoint) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		cur := e.endpoint(g, ep)
		migrated := meta.IsStatusConditionTrue(cur.Status.Conditions, v1alpha1.ConditionDatabaseMigrated)
		job := &batchv1.Job{}
		if !migrated && e.k8s.Get(e.ctx, key(ep.Namespace, resources.MigrationJobName(ep)), job) == nil && !jobComplete(job) {
			g.Expect(e.markComplete(job)).To(Succeed())
		}
		g.Expect(migrated).To(BeTrue(), "DatabaseMigrated is not True yet")
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
}

// makeAvailable plays the Deployment controller: every replica of the current template
// is updated and available.
func (e *env) makeAvailable(t *testing.T, ep *v1alpha1.WebhookEndpoint) *appsv1.Deployment {
	t.Helper()
	return e.makeDeploymentAvailable(t, key(ep.Namespace, resources.ReceiverName(ep)))
}

// makeDeploymentAvailable plays the Deployment controller for the Deployment at k.
func (e *env) makeDeploymentAvailable(t *testing.T, k client.ObjectKey) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{}
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(e.k8s.Get(e.ctx, k, d)).To(Succeed())
		n := *d.Spec.Replicas
		d.Status = appsv1.DeploymentStatus{
			ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n,
			Conditions: []appsv1.DeploymentCondition{{
				Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable",
				LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now(),
			}},
		}
		g.Expect(e.k8s.Status().Update(e.ctx, d)).To(Succeed())
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	return d
}

// ready drives a new endpoint to Ready=True: create, complete the migration, make the
// Deployment available.
func (e *env) ready(t *testing.T, ep *v1alpha1.WebhookEndpoint) *v1alpha1.WebhookEndpoint {
	t.Helper()
	e.create(t, ep)
	e.migrated(t, ep)
	e.makeAvailable(t, ep)
	return e.waitCondition(t, ep, v1alpha1.ConditionReady, metav1.ConditionTrue, controllers.ReasonReady)
}

// reconcileNow runs one reconcile synchronously.
func (e *env) reconcileNow(t *testing.T, ep *v1alpha1.WebhookEndpoint) ctrl.Result {
	t.Helper()
	res, err := e.direct.Reconcile(e.ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(ep)})
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	return res
}

// touch changes a label, which makes the manager reconcile the endpoint, and waits
// until the status describes the current generation. A label patch does not bump the
// generation, so touch can return before that reconcile has run: a check that needs it
// done polls for its effect. A merge patch of the label only:
// an Update would send the whole spec back, and Go's rendering of defaulted durations
// ("5m0s" for "5m") would count as a spec change.
func (e *env) touch(t *testing.T, ep *v1alpha1.WebhookEndpoint) {
	t.Helper()
	g := NewWithT(t)
	cur := e.endpoint(g, ep)
	patch := client.MergeFrom(cur.DeepCopy())
	if cur.Labels == nil {
		cur.Labels = map[string]string{}
	}
	cur.Labels["test.hookkeeper.dev/touch"] = randomName("t")
	g.Expect(e.k8s.Patch(e.ctx, cur, patch)).To(Succeed())
	g.Eventually(func(g Gomega) {
		cur := e.endpoint(g, ep)
		g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
}

func configHash(d *appsv1.Deployment) string {
	return d.Spec.Template.Annotations[resources.AnnotationConfigHash]
}

func signingEnv(d *appsv1.Deployment) []string {
	var keys []string
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if strings.HasPrefix(e.Name, "HOOKKEEPER_SIGNING_SECRET_") {
			keys = append(keys, e.Name+"="+e.ValueFrom.SecretKeyRef.Key)
		}
	}
	return keys
}

// gatewayCRDs are the pinned Gateway API module's standard HTTPRoute and Gateway CRDs.
func gatewayCRDs(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api").Output()
	if err != nil {
		t.Fatalf("locate sigs.k8s.io/gateway-api: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "standard")
	return []string{
		filepath.Join(dir, "gateway.networking.k8s.io_httproutes.yaml"),
		filepath.Join(dir, "gateway.networking.k8s.io_gateways.yaml"),
	}
}
