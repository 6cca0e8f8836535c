// Package controllers holds the WebhookEndpoint reconciler: one Reconcile skeleton and one
// file per owned concern. Desired objects come from internal/resources; this package
// only resolves inputs, applies objects with server-side apply and reports status.
package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/resources"
)

// FieldOwner is the server-side apply field manager of every object the operator writes.
const FieldOwner = "hookkeeper"

// Options configure the reconciler.
type Options struct {
	// ReceiverImage runs the receiver and migration pods unless an endpoint overrides it.
	ReceiverImage string
	// AllowedImages are the other images an endpoint's spec.receiver.image or a pool's
	// spec.image may name (the manager's --allowed-receiver-images); an entry ending in
	// '*' allows every image it is a prefix of. Empty allows ReceiverImage only: the
	// receiver and migration pods get the Secrets the endpoint names, so an image chosen
	// by whoever may edit endpoints would read them.
	AllowedImages []string
	// Validate checks what only Go can check (CEL compiles, templates parse); nil means
	// config.Validate.
	Validate func(*v1alpha1.WebhookEndpoint) error
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time
	// KeyNamespace holds the Secret with the per-install key of the rollout hashes
	// (HashKeySecretName): the operator's own namespace. Empty means DefaultKeyNamespace.
	KeyNamespace string
	// MonitoringLabels go on every endpoint's ServiceMonitor and PrometheusRule (the
	// manager's --monitoring-labels); an endpoint's spec.monitoring.labels win on the
	// same key, and neither overrides the operator's own labels.
	MonitoringLabels map[string]string
}

// WebhookEndpointReconciler turns a WebhookEndpoint into a migration Job, a receiver
// Deployment and the objects around it, and reports what it saw in status.
type WebhookEndpointReconciler struct {
	client.Client
	Scheme *runtime.Scheme
	// Recorder emits Events on the WebhookEndpoint (events.k8s.io).
	Recorder events.EventRecorder
	// APIReader reads objects the manager does not cache (migration pods, optional kinds);
	// nil means Client.
	APIReader client.Reader
	Options   Options

	controller controller.Controller
	cache      cache.Cache
	watchMu    sync.Mutex
	watching   map[string]bool

	keyMu sync.Mutex
	key   []byte
}

// +kubebuilder:rbac:groups=hookkeeper.dev,resources=webhookendpoints,verbs=get;list;watch
// +kubebuilder:rbac:groups=hookkeeper.dev,resources=webhookendpoints/status,verbs=get;patch;update
// Owned objects carry a controller reference with blockOwnerDeletion, which the
// OwnerReferencesPermissionEnforcement admission plugin (on in OpenShift) allows only to
// a requester that may update the owner's finalizers.
// +kubebuilder:rbac:groups=hookkeeper.dev,resources=webhookendpoints/finalizers,verbs=update
// Secrets: get reads the referenced ones (uncached); list and watch serve the
// metadata-only watch. Creating the hash key Secret is a Role in the operator's
// namespace (config/rbac/hash_key_role.yaml), not a cluster-wide grant.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list
// +kubebuilder:rbac:groups="",resources=services;serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies;ingresses,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=httproutes,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=servicemonitors;prometheusrules,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// Reconcile drives one WebhookEndpoint towards its desired state. Each step either
// completes or records why it cannot, and the status is patched once at the end.
func (r *WebhookEndpointReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	ep := &v1alpha1.WebhookEndpoint{}
	if err := r.Get(ctx, req.NamespacedName, ep); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !ep.DeletionTimestamp.IsZero() {
		// Owned objects carry controller owner references; the garbage collector
		// removes them, so there is nothing to finalize.
		return ctrl.Result{}, nil
	}
	st := newState(ep, r.now())
	defer st.db.close()
	err := r.reconcileSteps(ctx, st)
	if err != nil {
		logger.V(1).Info("reconcile step failed, will retry", "error", err.Error())
		st.failed = err
	}
	r.failedStepEvent(st)
	statusErr := r.patchStatus(ctx, st)
	if err := errors.Join(err, statusErr); err != nil {
		return ctrl.Result{}, err
	}
	return st.result(), nil
}

// reconcileSteps runs the skeleton; a step that cannot proceed returns errStop after
// recording its condition, so later steps never act on a broken earlier one.
func (r *WebhookEndpointReconciler) reconcileSteps(ctx context.Context, st *state) error {
	steps := []struct {
		name string
		run  func(context.Context, *state) error
	}{
		{"validate config", r.reconcileConfig},
		{"resolve secrets", r.reconcileSecrets},
		{"service account", r.reconcileServiceAccount},
		{"migration", r.reconcileMigration},
		{"sink health", r.reconcileSinkHealth},
		{"deployment", r.reconcileDeployment},
		{"service", r.reconcileService},
		{"disruption budget and autoscaler", r.reconcilePDB},
		{"monitoring", r.reconcileMonitoring},
		{"exposure", r.reconcileExposure},
		{"network policy", r.reconcileNetworkPolicy},
	}
	for _, step := range steps {
		if err := step.run(ctx, st); err != nil {
			if errors.Is(err, errStop) {
				return nil
			}
			return fmt.Errorf("%s: %w", step.name, err)
		}
	}
	return nil
}

// errStop ends a reconcile early without an error: the step set a condition saying why.
var errStop = errors.New("stop reconcile")

func (r *WebhookEndpointReconciler) now() time.Time {
	if r.Options.Now != nil {
		return r.Options.Now()
	}
	return time.Now()
}

func (r *WebhookEndpointReconciler) validate(ep *v1alpha1.WebhookEndpoint) error {
	if r.Options.Validate != nil {
		return r.Options.Validate(ep)
	}
	return config.Validate(ep)
}

func (r *WebhookEndpointReconciler) reader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// isNotInstalled reports whether err means the kind's CRD is not served.
func isNotInstalled(err error) bool {
	return meta.IsNoMatchError(err) || (apierrors.IsNotFound(err) && isMissingResource(err))
}

// isMissingResource tells "the resource type does not exist" apart from "the object does
// not exist": the API server answers both with 404, but only the first has no details
// naming the object.
func isMissingResource(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	return d == nil || d.Name == ""
}

// state carries one reconcile's inputs and findings from step to step.
type state struct {
	ep       *v1alpha1.WebhookEndpoint
	original *v1alpha1.WebhookEndpoint
	now      time.Time

	rendered   resources.Rendered
	values     map[string][]byte
	hashKey    []byte
	configHash string

	// url is the address providers send webhooks to, set by the exposure step.
	url string
	// db reads the endpoint's database; closed when the reconcile ends.
	db        endpointDB
	requeueAt time.Time
	// failed is the error of a step that could not complete (the API server refused an
	// apply, an object of that name belongs to someone else): Ready says it, not only
	// the operator's log.
	failed error
}

func newState(ep *v1alpha1.WebhookEndpoint, now time.Time) *state {
	return &state{ep: ep, original: ep.DeepCopy(), now: now}
}

// requeue asks for another reconcile no later than at.
func (st *state) requeue(at time.Time) {
	if st.requeueAt.IsZero() || at.Before(st.requeueAt) {
		st.requeueAt = at
	}
}

func (st *state) result() ctrl.Result {
	if st.requeueAt.IsZero() {
		return ctrl.Result{}
	}
	d := st.requeueAt.Sub(st.now)
	if d < 100*time.Millisecond {
		d = 100 * time.Millisecond
	}
	return ctrl.Result{RequeueAfter: d}
}
