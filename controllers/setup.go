package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// EndpointWorkers is how many WebhookEndpoints are reconciled at once. A reconcile
// waits mostly on the API server and on the endpoint's database (schema version, sink
// state, pool heartbeats), so one worker made 200 endpoints created together wait
// minutes for their first status; the reconciler's shared state is locked.
const EndpointWorkers = 4

// SetupWithManager registers the reconciler, the Secret field index and the watches on
// owned objects. Kinds that may be missing (HTTPRoute, ServiceMonitor, PrometheusRule)
// are watched from the first reconcile that finds their CRD, so the manager starts
// whether or not they are installed.
func (r *WebhookEndpointReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Scheme = cmp.Or(r.Scheme, mgr.GetScheme())
	r.APIReader = cmp.Or(r.APIReader, mgr.GetAPIReader())
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1alpha1.WebhookEndpoint{},
		referenceIndexField, indexSecretNames); err != nil {
		return fmt.Errorf("index WebhookEndpoints by Secret name: %w", err)
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("webhookendpoint").
		WithOptions(controller.Options{MaxConcurrentReconciles: EndpointWorkers}).
		For(&v1alpha1.WebhookEndpoint{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}))).
		Owns(&batchv1.Job{}).
		Owns(&corev1.ServiceAccount{})
	c, err := ownsReceiverKinds(b).
		// Metadata only: a changed resourceVersion is all the watch needs to say, and the
		// cache then holds no Secret values (see CacheOptions).
		WatchesMetadata(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.endpointsForSecret)).
		// A pooled endpoint's ReceiverAvailable follows its pool's status.
		Watches(&v1alpha1.WebhookReceiverPool{}, r.poolChanges()).
		Build(r)
	if err != nil {
		return fmt.Errorf("build WebhookEndpoint controller: %w", err)
	}
	r.controller = c
	r.cache = mgr.GetCache()
	r.watching = map[string]bool{}
	return nil
}

// ownsReceiverKinds makes b watch the kinds a receiver is made of (Deployment,
// Service, PodDisruptionBudget, HorizontalPodAutoscaler, NetworkPolicy, Ingress) when
// b's kind owns them: a dedicated endpoint's receiver and a pool's alike.
func ownsReceiverKinds(b *builder.Builder) *builder.Builder {
	for _, obj := range []client.Object{
		&appsv1.Deployment{}, &corev1.Service{}, &policyv1.PodDisruptionBudget{},
		&autoscalingv2.HorizontalPodAutoscaler{}, &networkingv1.NetworkPolicy{}, &networkingv1.Ingress{},
	} {
		b = b.Owns(obj)
	}
	return b
}

// ensureWatch starts watching obj's kind (owned by a WebhookEndpoint) once; the caller
// has checked that the kind is served.
func (r *WebhookEndpointReconciler) ensureWatch(_ context.Context, obj client.Object) error {
	if r.controller == nil {
		return nil
	}
	gvk, err := apiutil.GVKForObject(obj, r.Scheme)
	if err != nil {
		return fmt.Errorf("kind of %T: %w", obj, err)
	}
	r.watchMu.Lock()
	defer r.watchMu.Unlock()
	if r.watching[gvk.String()] {
		return nil
	}
	src := source.Kind(r.cache, obj, handler.EnqueueRequestForOwner(r.Scheme, r.RESTMapper(),
		&v1alpha1.WebhookEndpoint{}, handler.OnlyControllerOwner()))
	if err := r.controller.Watch(src); err != nil {
		return fmt.Errorf("watch %s: %w", gvk, err)
	}
	r.watching[gvk.String()] = true
	return nil
}

// AddToScheme registers every type the reconciler reads or writes: the core kinds,
// WebhookEndpoint and the Gateway API kinds (used only when their CRDs are installed).
func AddToScheme(s *runtime.Scheme) error {
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme, gatewayv1.Install} {
		if err := add(s); err != nil {
			return fmt.Errorf("register types: %w", err)
		}
	}
	return nil
}

// Setup wires a WebhookEndpointReconciler, a WebhookReceiverPoolReconciler and a
// WebhookReplayReconciler into mgr with
// the manager's client, scheme, API reader and an events.k8s.io recorder: the one call
// the manager command and the local dev cluster make.
func Setup(mgr ctrl.Manager, opts Options) error {
	c, scheme, recorder, reader := mgr.GetClient(), mgr.GetScheme(), mgr.GetEventRecorder(FieldOwner), mgr.GetAPIReader()
	for _, r := range []interface{ SetupWithManager(ctrl.Manager) error }{
		&WebhookEndpointReconciler{Client: c, Scheme: scheme, Recorder: recorder, APIReader: reader, Options: opts},
		&WebhookReceiverPoolReconciler{Client: c, Scheme: scheme, Recorder: recorder, APIReader: reader, Options: opts},
		&WebhookReplayReconciler{Client: c, APIReader: reader, Recorder: recorder},
	} {
		if err := r.SetupWithManager(mgr); err != nil {
			return err
		}
	}
	return nil
}

// RunInProcess runs the operator inside the calling process until ctx ends, as the
// local cluster (`hookkeeper dev`) and the end-to-end suite do: one replica, so no
// leader election, and no metrics or probe servers to collide with anything else.
// When cfg impersonates a ServiceAccount and opts.KeyNamespace is empty, the hash key
// Secret lives in the account's namespace, as the manager in a pod keeps it in its own.
func RunInProcess(ctx context.Context, cfg *rest.Config, opts Options) error {
	if opts.KeyNamespace == "" {
		opts.KeyNamespace = serviceAccountNamespace(cfg.Impersonate.UserName)
	}
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  CacheOptions(),
		Client:                 ClientOptions(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
		// The local cluster restarts the operator in the same process
		// (devcluster.Session.RestartOperator): the controllers' names come again.
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	if err := Setup(mgr, opts); err != nil {
		return err
	}
	if err := mgr.Start(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("run manager: %w", err)
	}
	return nil
}

// serviceAccountNamespace returns the namespace of a ServiceAccount user name
// (system:serviceaccount:<namespace>:<name>), else "".
func serviceAccountNamespace(user string) string {
	qualified, ok := strings.CutPrefix(user, "system:serviceaccount:")
	if !ok {
		return ""
	}
	ns, name, ok := strings.Cut(qualified, ":")
	if !ok || ns == "" || name == "" {
		return ""
	}
	return ns
}
