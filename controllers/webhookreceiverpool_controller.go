package controllers

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/resources"
	"github.com/hookkeeper/hookkeeper/internal/store"
)

// Reasons of a pool's conditions and of a pooled endpoint's ReceiverAvailable.
const (
	ReasonPoolNotFound    = "PoolNotFound"
	ReasonNotLoaded       = "NotLoadedByPool"
	ReasonMembersNotReady = "MembersNotLoaded"
	// ReasonPoolTooLarge: the members' rendered configs and Secret values do not fit in
	// the pool's endpoints Secret.
	ReasonPoolTooLarge = "PoolSecretTooLarge"
)

// maxSecretBytes is the API server's limit on a Secret's data.
const maxSecretBytes = 1 << 20

// poolTooLargeError says the pool's endpoints Secret would exceed maxSecretBytes.
type poolTooLargeError struct {
	secret  string
	size    int
	members int
}

func (e *poolTooLargeError) Error() string {
	return fmt.Sprintf("the endpoints Secret %s would hold %d bytes for %d member(s), more than the %d a Secret may hold; "+
		"move some endpoints to another WebhookReceiverPool or to receivers of their own", e.secret, e.size, e.members, maxSecretBytes)
}

// WebhookReceiverPoolReconciler runs a pool's receivers: it gathers the rendered config
// and Secret values of every endpoint of the namespace whose spec.receiver.poolRef names
// the pool into one Secret the receivers read (resources.PoolEndpoints), and applies the
// receivers' Deployment, Service and the objects around them with the same builders an
// endpoint's own receivers use (resources.Receivers).
type WebhookReceiverPoolReconciler struct {
	client.Client
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	APIReader client.Reader
	Options   Options
}

// +kubebuilder:rbac:groups=hookkeeper.dev,resources=webhookreceiverpools,verbs=get;list;watch
// +kubebuilder:rbac:groups=hookkeeper.dev,resources=webhookreceiverpools/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=hookkeeper.dev,resources=webhookreceiverpools/finalizers,verbs=update
// The pool's endpoints Secret holds copies of its members' Secret values for its
// receivers, which have no API access: the operator writes Secrets only for pools.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create;update;patch;delete
// +kubebuilder:rbac:groups=autoscaling,resources=horizontalpodautoscalers,verbs=get;list;watch;create;update;patch;delete

// Reconcile brings one pool's receivers and endpoints Secret to what its members need
// and reports them in status.
func (r *WebhookReceiverPoolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pool := &v1alpha1.WebhookReceiverPool{}
	if err := r.Get(ctx, req.NamespacedName, pool); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pool.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // owned objects go with the garbage collector
	}
	original := pool.DeepCopy()
	now := r.now()
	members, configs, requeueAt, err := r.gatherMembers(ctx, pool, now)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !r.Options.imageAllowed(pool.Spec.Image) {
		return r.failed(ctx, pool, original, members, ReasonInvalidConfig, errors.New(imageNotAllowed("spec.image", pool.Spec.Image)))
	}
	rec := resources.PoolReceivers(pool, resources.Options{Image: r.Options.ReceiverImage})
	deployment, err := r.applyReceivers(ctx, pool, rec, configs)
	var tooLarge *poolTooLargeError
	switch {
	case errors.As(err, &tooLarge):
		return r.failed(ctx, pool, original, members, ReasonPoolTooLarge, err)
	case isNotOwned(err):
		return r.failed(ctx, pool, original, members, ReasonNotOwned, err)
	case apierrors.IsInvalid(err) || apierrors.IsForbidden(err):
		return r.failed(ctx, pool, original, members, ReasonWriteRejected, err)
	case err != nil:
		return r.failed(ctx, pool, original, members, ReasonStepFailed, err)
	}
	exposureRequeue, err := r.reconcileExposure(ctx, pool)
	if err != nil {
		return ctrl.Result{}, err
	}
	r.summarize(pool, members, deployment)
	if err := r.patchStatus(ctx, pool, original); err != nil {
		return ctrl.Result{}, err
	}
	var after time.Duration
	if !requeueAt.IsZero() {
		after = max(requeueAt.Sub(now), 100*time.Millisecond)
	}
	if exposureRequeue > 0 && (after == 0 || exposureRequeue < after) {
		after = exposureRequeue
	}
	return ctrl.Result{RequeueAfter: after}, nil
}

// failed reports what stops the pool's receivers in its status (Ready False, and Stalled
// when a person must act, else Reconciling) and in a Warning Event when it starts or
// changes. A pool stalled by its own spec or its members waits for them to change (both
// are watched); any other failure, NotOwned and WriteRejected included (deleting the
// object in the way, or lifting a policy, fires no event the pool watches), is retried
// with backoff.
func (r *WebhookReceiverPoolReconciler) failed(ctx context.Context, pool, original *v1alpha1.WebhookReceiverPool,
	members []v1alpha1.PoolMember, reason string, cause error) (ctrl.Result, error) {
	msg := oneLine(cause.Error())
	stalled := reason != ReasonStepFailed
	if prev := meta.FindStatusCondition(original.Status.Conditions, v1alpha1.ConditionReady); prev == nil ||
		prev.Reason != reason || prev.Message != msg {
		recordEvent(r.Recorder, pool, corev1.EventTypeWarning, reason, "Reconcile", "%s", msg)
	}
	st := &pool.Status
	st.ObservedGeneration = pool.Generation
	st.Endpoints = members
	st.EndpointCount = int32(len(members)) //nolint:gosec // bounded by the namespace's endpoints
	set := func(t string, s metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason,
			Message: msg, ObservedGeneration: pool.Generation})
	}
	set(v1alpha1.ConditionReady, metav1.ConditionFalse, reason, msg)
	if stalled {
		set(v1alpha1.ConditionStalled, metav1.ConditionTrue, reason, msg)
		set(v1alpha1.ConditionReconciling, metav1.ConditionFalse, reason, "")
	} else {
		set(v1alpha1.ConditionReconciling, metav1.ConditionTrue, reason, msg)
		set(v1alpha1.ConditionStalled, metav1.ConditionFalse, reason, "")
	}
	if err := r.patchStatus(ctx, pool, original); err != nil {
		return ctrl.Result{}, errors.Join(cause, err)
	}
	if stalled && reason != ReasonNotOwned && reason != ReasonWriteRejected {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, cause
}

// patchStatus writes the pool's status when it changed.
func (r *WebhookReceiverPoolReconciler) patchStatus(ctx context.Context, pool, original *v1alpha1.WebhookReceiverPool) error {
	if equality.Semantic.DeepEqual(original.Status, pool.Status) {
		return nil
	}
	// A pool deleted since it was read has no status to write.
	if err := r.Status().Patch(ctx, pool, client.MergeFrom(original)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("patch status of WebhookReceiverPool %s/%s: %w", pool.Namespace, pool.Name, err)
	}
	return nil
}

func (r *WebhookReceiverPoolReconciler) now() time.Time {
	if r.Options.Now != nil {
		return r.Options.Now()
	}
	return time.Now()
}

func (r *WebhookReceiverPoolReconciler) reader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// gatherMembers renders every endpoint that names pool. An endpoint whose config is
// invalid, whose Secrets cannot be read or whose signing secrets all expired is listed
// as not loaded, with why; the others' configs go to the receivers. requeueAt is the
// next signing-secret expiry among them.
func (r *WebhookReceiverPoolReconciler) gatherMembers(ctx context.Context, pool *v1alpha1.WebhookReceiverPool, now time.Time) (
	[]v1alpha1.PoolMember, []resources.PoolMemberConfig, time.Time, error) {
	var list v1alpha1.WebhookEndpointList
	if err := r.List(ctx, &list, client.InNamespace(pool.Namespace)); err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("list WebhookEndpoints of %s: %w", pool.Namespace, err)
	}
	validate := r.Options.Validate
	if validate == nil {
		validate = config.Validate
	}
	var members []v1alpha1.PoolMember
	var configs []resources.PoolMemberConfig
	var requeueAt time.Time
	// Members usually share their Secrets (one database URL, one signing secret): each
	// is read once per reconcile, not once per member.
	secrets := &secretMemo{reader: r.reader(), got: map[client.ObjectKey]*corev1.Secret{}}
	for i := range list.Items {
		ep := &list.Items[i]
		if ref := ep.Spec.Receiver.PoolRef; ref == nil || ref.Name != pool.Name || !ep.DeletionTimestamp.IsZero() {
			continue
		}
		m := v1alpha1.PoolMember{Name: ep.Name, Path: resources.PoolPath(ep),
			Ready: meta.IsStatusConditionTrue(ep.Status.Conditions, v1alpha1.ConditionReady)}
		mc, err := r.member(ctx, ep, now, validate, secrets)
		var problem memberProblem
		switch {
		case errors.As(err, &problem):
			m.Message = oneLine(problem.msg)
		case err != nil:
			return nil, nil, time.Time{}, err
		default:
			m.Loaded = true
			configs = append(configs, mc)
		}
		if next, ok := resources.NextExpiry(ep, now); ok && (requeueAt.IsZero() || next.Before(requeueAt)) {
			requeueAt = next.Add(expiryMargin)
		}
		members = append(members, m)
	}
	slices.SortFunc(members, func(a, b v1alpha1.PoolMember) int { return strings.Compare(a.Name, b.Name) })
	return members, configs, requeueAt, nil
}

// secretMemo reads each Secret once: a pool reconcile's members share a few Secrets.
// It lives for one reconcile, so a rotated Secret is read anew by the next.
type secretMemo struct {
	reader client.Reader
	got    map[client.ObjectKey]*corev1.Secret
}

// Get reads a Secret through reader the first time, then returns a copy of what it read
// (a Secret not found is read again).
func (m *secretMemo) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	out, ok := obj.(*corev1.Secret)
	if !ok {
		return m.reader.Get(ctx, key, obj, opts...)
	}
	if s, ok := m.got[key]; ok {
		s.DeepCopyInto(out)
		return nil
	}
	if err := m.reader.Get(ctx, key, out, opts...); err != nil {
		return err
	}
	m.got[key] = out.DeepCopy()
	return nil
}

// List lists through reader.
func (m *secretMemo) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return m.reader.List(ctx, list, opts...)
}

// memberProblem is what keeps an endpoint out of its pool that a person must fix (its
// config, its Secrets); the pool's status lists it. Other errors are the API's.
type memberProblem struct{ msg string }

func (p memberProblem) Error() string { return p.msg }

// member renders one endpoint for the pool; a memberProblem says what keeps it out.
func (r *WebhookReceiverPoolReconciler) member(ctx context.Context, ep *v1alpha1.WebhookEndpoint, now time.Time,
	validate func(*v1alpha1.WebhookEndpoint) error, secrets client.Reader) (resources.PoolMemberConfig, error) {
	if err := validate(ep); err != nil {
		return resources.PoolMemberConfig{}, memberProblem{"invalid config: " + err.Error()}
	}
	rendered, err := resources.Render(ep, now)
	if err != nil {
		return resources.PoolMemberConfig{}, memberProblem{"render: " + err.Error()}
	}
	if len(rendered.ActiveSecrets) == 0 {
		return resources.PoolMemberConfig{}, memberProblem{"every spec.signingSecrets entry has passed its expiresAt; add a current secret"}
	}
	values, problem, err := secretValues(ctx, secrets, ep.Namespace, rendered.Refs)
	if err != nil {
		return resources.PoolMemberConfig{}, err
	}
	if problem != nil {
		return resources.PoolMemberConfig{}, memberProblem{problem.message}
	}
	mc, err := resources.PoolMember(ep, rendered, values)
	if err != nil {
		return resources.PoolMemberConfig{}, memberProblem{err.Error()}
	}
	return mc, nil
}

// applyReceivers applies the endpoints Secret first (the pods mount it), then the
// ServiceAccount, Deployment and Service, and a PodDisruptionBudget and
// HorizontalPodAutoscaler when wanted (deleting them otherwise). It returns the
// Deployment as applied.
func (r *WebhookReceiverPoolReconciler) applyReceivers(ctx context.Context, pool *v1alpha1.WebhookReceiverPool,
	rec resources.Receivers, configs []resources.PoolMemberConfig) (*appsv1.Deployment, error) {
	secret := resources.PoolEndpoints(pool, configs)
	size := 0
	for k, v := range secret.Data {
		size += len(k) + len(v)
	}
	if size > maxSecretBytes {
		return nil, &poolTooLargeError{secret: secret.Name, size: size, members: len(configs)}
	}
	for _, obj := range []client.Object{secret, rec.ServiceAccount()} {
		if _, err := applyOwned(ctx, r.Client, r.Scheme, pool, obj); err != nil {
			return nil, err
		}
	}
	live, err := applyOwned(ctx, r.Client, r.Scheme, pool, rec.Deployment())
	if err != nil {
		return nil, err
	}
	deployment := &appsv1.Deployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(live.Object, deployment); err != nil {
		return nil, fmt.Errorf("read applied Deployment %s: %w", rec.Name, err)
	}
	if _, err := applyOwned(ctx, r.Client, r.Scheme, pool, rec.Service()); err != nil {
		return nil, err
	}
	// The optional objects are applied when wanted and removed, if the pool owns them,
	// when not.
	hpa := rec.HorizontalPodAutoscaler()
	for _, o := range []struct {
		want          bool
		desired, kind client.Object
	}{
		{rec.WantsPDB(), rec.PodDisruptionBudget(), &policyv1.PodDisruptionBudget{}},
		{rec.WantsNetworkPolicy(), rec.NetworkPolicy(), &networkingv1.NetworkPolicy{}},
		{hpa != nil, hpa, &autoscalingv2.HorizontalPodAutoscaler{}},
	} {
		if o.want {
			_, err = applyOwned(ctx, r.Client, r.Scheme, pool, o.desired)
		} else {
			o.kind.SetName(rec.Name)
			o.kind.SetNamespace(rec.Namespace)
			err = deleteIfOwned(ctx, r.Client, r.reader(), pool, o.kind)
		}
		if err != nil {
			return nil, err
		}
	}
	// The applied object carries the last status the API server had; read the cached
	// one for availability, which the Deployment watch keeps current.
	current := &appsv1.Deployment{}
	if err := r.Get(ctx, client.ObjectKeyFromObject(deployment), current); err == nil {
		deployment.Status = current.Status
	}
	return deployment, nil
}

// summarize writes the pool's status and its kstatus conditions.
func (r *WebhookReceiverPoolReconciler) summarize(pool *v1alpha1.WebhookReceiverPool, members []v1alpha1.PoolMember, d *appsv1.Deployment) {
	st := &pool.Status
	st.ObservedGeneration = pool.Generation
	st.URL = resources.PoolURL(pool)
	st.Endpoints = members
	st.EndpointCount = int32(len(members)) //nolint:gosec // bounded by the namespace's endpoints
	st.Replicas, st.ReadyReplicas = d.Status.Replicas, d.Status.ReadyReplicas

	set := func(t string, s metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason,
			Message: oneLine(msg), ObservedGeneration: pool.Generation})
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	available := d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas >= want && d.Status.AvailableReplicas >= want
	if available {
		set(v1alpha1.ConditionReceiverAvailable, metav1.ConditionTrue, ReasonAvailable,
			fmt.Sprintf("%d of %d replicas available and up to date", d.Status.AvailableReplicas, want))
	} else {
		set(v1alpha1.ConditionReceiverAvailable, metav1.ConditionFalse, ReasonRollingOut,
			fmt.Sprintf("Deployment %s has %d of %d replicas updated and %d available", d.Name,
				d.Status.UpdatedReplicas, want, d.Status.AvailableReplicas))
	}
	var notLoaded []string
	for _, m := range members {
		if !m.Loaded {
			notLoaded = append(notLoaded, m.Name+": "+m.Message)
		}
	}
	exposed := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionExposed)
	switch {
	case !available:
		set(v1alpha1.ConditionReady, metav1.ConditionFalse, ReasonProgressing, "the pool's receivers are rolling out")
		set(v1alpha1.ConditionReconciling, metav1.ConditionTrue, ReasonProgressing, "waiting for the pool's receivers")
	case exposed != nil && exposed.Status != metav1.ConditionTrue:
		// As for an endpoint: an exposure asked for and not in place holds Ready back;
		// one a person must fix (no Gateway API, a rejected route) stalls.
		msg := "Exposed: " + exposed.Message
		set(v1alpha1.ConditionReady, metav1.ConditionFalse, exposed.Reason, msg)
		if stalledReasons[exposed.Reason] {
			set(v1alpha1.ConditionReconciling, metav1.ConditionFalse, exposed.Reason, "")
			set(v1alpha1.ConditionStalled, metav1.ConditionTrue, exposed.Reason, msg)
			return
		}
		set(v1alpha1.ConditionReconciling, metav1.ConditionTrue, exposed.Reason, msg)
	case len(notLoaded) > 0:
		// The pool serves the others; the endpoints' own conditions say what to fix.
		set(v1alpha1.ConditionReady, metav1.ConditionTrue, ReasonMembersNotReady,
			fmt.Sprintf("%d of %d endpoint(s) served; not loaded: %s", len(members)-len(notLoaded), len(members), strings.Join(notLoaded, "; ")))
		set(v1alpha1.ConditionReconciling, metav1.ConditionFalse, ReasonReady, "")
	default:
		set(v1alpha1.ConditionReady, metav1.ConditionTrue, ReasonReady, fmt.Sprintf("%d endpoint(s) served", len(members)))
		set(v1alpha1.ConditionReconciling, metav1.ConditionFalse, ReasonReady, "")
	}
	set(v1alpha1.ConditionStalled, metav1.ConditionFalse, ReasonReady, "")
}

// SetupWithManager watches pools, the objects they own, the endpoints that name them
// and the Secrets those endpoints reference (metadata only, through the endpoints'
// Secret index).
func (r *WebhookReceiverPoolReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Scheme = cmp.Or(r.Scheme, mgr.GetScheme())
	r.APIReader = cmp.Or(r.APIReader, mgr.GetAPIReader())
	b := ctrl.NewControllerManagedBy(mgr).
		Named("webhookreceiverpool").
		For(&v1alpha1.WebhookReceiverPool{}, builder.WithPredicates(predicate.GenerationChangedPredicate{}))
	err := ownsReceiverKinds(b).
		// What the pool renders comes from its endpoints' spec; of their status it lists
		// only Ready. Other status writes (several per endpoint as it turns Ready) do not
		// concern it: with 200 endpoints each one re-rendered all 200.
		Watches(&v1alpha1.WebhookEndpoint{}, handler.EnqueueRequestsFromMapFunc(poolOfEndpoint),
			builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, endpointReadyChanged))).
		WatchesMetadata(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.poolsForSecret)).
		Complete(r)
	if err != nil {
		return fmt.Errorf("build WebhookReceiverPool controller: %w", err)
	}
	return nil
}

// endpointReadyChanged passes an endpoint update whose Ready condition changed status.
var endpointReadyChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	ready := func(o client.Object) bool {
		ep, ok := o.(*v1alpha1.WebhookEndpoint)
		return ok && meta.IsStatusConditionTrue(ep.Status.Conditions, v1alpha1.ConditionReady)
	}
	return ready(e.ObjectOld) != ready(e.ObjectNew)
}}

// poolOfEndpoint maps an endpoint to the pool it names (old and new object both pass
// here on an update, so leaving a pool reconciles the pool left).
func poolOfEndpoint(_ context.Context, obj client.Object) []reconcile.Request {
	ep, ok := obj.(*v1alpha1.WebhookEndpoint)
	if !ok || ep.Spec.Receiver.PoolRef == nil {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: ep.Namespace, Name: ep.Spec.Receiver.PoolRef.Name}}}
}

// poolsForSecret maps a Secret to the pools of the endpoints that reference it.
func (r *WebhookReceiverPoolReconciler) poolsForSecret(ctx context.Context, obj client.Object) []reconcile.Request {
	var list v1alpha1.WebhookEndpointList
	if err := r.List(ctx, &list, client.InNamespace(obj.GetNamespace()),
		client.MatchingFields{referenceIndexField: obj.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "list endpoints referencing a Secret", "secret", obj.GetName())
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		for _, req := range poolOfEndpoint(ctx, &list.Items[i]) {
			if !slices.Contains(reqs, req) {
				reqs = append(reqs, req)
			}
		}
	}
	return reqs
}

// reconcilePooled is the receiver step of an endpoint a pool serves: its own
// Deployment, Service and PodDisruptionBudget go (the pool's receivers serve it), and
// ReceiverAvailable and the URL come from the pool.
func (r *WebhookEndpointReconciler) reconcilePooled(ctx context.Context, st *state) error {
	ep := st.ep
	opts := r.resourceOptions(st)
	own := resources.EndpointReceivers(ep, opts)
	for _, obj := range []client.Object{
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: own.Name, Namespace: own.Namespace}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: own.Name, Namespace: own.Namespace}},
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: own.Name, Namespace: own.Namespace}},
		&autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: own.Name, Namespace: own.Namespace}},
	} {
		if err := r.deleteOwned(ctx, ep, obj); err != nil {
			return err
		}
	}
	name := ep.Spec.Receiver.PoolRef.Name
	pool := &v1alpha1.WebhookReceiverPool{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: ep.Namespace, Name: name}, pool); err != nil {
		if client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("get WebhookReceiverPool %s/%s: %w", ep.Namespace, name, err)
		}
		st.setCondition(v1alpha1.ConditionReceiverAvailable, metav1.ConditionFalse, ReasonPoolNotFound, fmt.Sprintf(
			"spec.receiver.poolRef names WebhookReceiverPool %s, which does not exist in namespace %s; create it or remove poolRef",
			name, ep.Namespace))
		return errStop
	}
	st.url = resources.PoolURL(pool) + resources.PoolPath(ep)
	if pool.Status.PublicURL != "" {
		st.url = pool.Status.PublicURL + resources.PoolPath(ep)
	}
	var member *v1alpha1.PoolMember
	for i := range pool.Status.Endpoints {
		if pool.Status.Endpoints[i].Name == ep.Name {
			member = &pool.Status.Endpoints[i]
		}
	}
	poolAvailable := meta.IsStatusConditionTrue(pool.Status.Conditions, v1alpha1.ConditionReceiverAvailable)
	switch {
	case member == nil:
		st.setCondition(v1alpha1.ConditionReceiverAvailable, metav1.ConditionFalse, ReasonRollingOut,
			fmt.Sprintf("waiting for WebhookReceiverPool %s to take the endpoint in", name))
	case !member.Loaded:
		st.setCondition(v1alpha1.ConditionReceiverAvailable, metav1.ConditionFalse, ReasonNotLoaded,
			fmt.Sprintf("WebhookReceiverPool %s does not serve the endpoint: %s", name, member.Message))
	case !poolAvailable:
		c := meta.FindStatusCondition(pool.Status.Conditions, v1alpha1.ConditionReceiverAvailable)
		msg := "its receivers are not available yet"
		if c != nil {
			msg = c.Message
		}
		st.setCondition(v1alpha1.ConditionReceiverAvailable, metav1.ConditionFalse, ReasonUnavailable,
			fmt.Sprintf("WebhookReceiverPool %s: %s", name, msg))
	default:
		return r.poolServes(ctx, st, name)
	}
	return nil
}

// While a pool's receivers have not yet reported the endpoint's current config, the
// operator looks again after a quarter of the time it has waited, from poolServingPoll
// up to poolServingPollMax: a single endpoint turns Ready within seconds, and hundreds
// added at once (each reconcile reads the database) do not keep the operator busy
// re-reading heartbeats that arrive every 30 s.
const (
	poolServingPoll    = 2 * time.Second
	poolServingPollMax = 15 * time.Second
)

// poolServingWait is when to look again for the pool's heartbeats (see poolServingPoll).
func poolServingWait(st *state) time.Duration {
	prev := st.previous(v1alpha1.ConditionReceiverAvailable)
	if prev == nil || prev.Status == metav1.ConditionTrue {
		return poolServingPoll
	}
	return min(max(st.now.Sub(prev.LastTransitionTime.Time)/4, poolServingPoll), poolServingPollMax)
}

// poolServes sets ReceiverAvailable from the heartbeats the pool's receivers write into
// the endpoint's schema (they hold no API credentials): True once a receiver reports
// the endpoint ready with the config the operator rendered last, so Ready never comes
// before the pool serves what it says.
func (r *WebhookEndpointReconciler) poolServes(ctx context.Context, st *state, pool string) error {
	ep := st.ep
	ref := ep.Spec.Database.URLSecretRef
	sum := sha256.Sum256(st.rendered.JSON)
	hb, err := readPoolHeartbeats(ctx, &st.db, string(st.values[ref.Name+"/"+ref.Key]), ep.Spec.Database.Schema,
		ep.Namespace+"/"+ep.Name, hex.EncodeToString(sum[:8]))
	switch {
	case err != nil:
		st.requeue(st.now.Add(poolServingWait(st)))
		st.setCondition(v1alpha1.ConditionReceiverAvailable, metav1.ConditionUnknown, ReasonUnavailable,
			fmt.Sprintf("cannot read the heartbeats WebhookReceiverPool %s's receivers write in schema %q: %s", pool, ep.Spec.Database.Schema, oneLine(err.Error())))
	case hb.serving == 0:
		st.requeue(st.now.Add(poolServingWait(st)))
		msg := fmt.Sprintf("waiting for WebhookReceiverPool %s's receivers to serve the endpoint's current config (%d of %d report it)", pool, hb.serving, hb.reporting)
		if hb.detail != "" {
			msg += ": " + hb.detail
		}
		st.setCondition(v1alpha1.ConditionReceiverAvailable, metav1.ConditionFalse, ReasonNotLoaded, msg)
	default:
		if st.transitioned(v1alpha1.ConditionReceiverAvailable, metav1.ConditionTrue, ReasonAvailable) {
			r.event(ep, corev1.EventTypeNormal, EventReceiverAvailable, "Rollout",
				"served by WebhookReceiverPool %s at %s", pool, resources.PoolPath(ep))
		}
		st.setCondition(v1alpha1.ConditionReceiverAvailable, metav1.ConditionTrue, ReasonAvailable,
			fmt.Sprintf("served by WebhookReceiverPool %s at %s (%d receiver(s) serve its current config)", pool, resources.PoolPath(ep), hb.serving))
	}
	return nil
}

// poolHeartbeats sums up the heartbeat rows of one endpoint that are recent.
type poolHeartbeats struct {
	serving, reporting int
	detail             string
}

// heartbeatFresh is how old a heartbeat may be and still count: three of the
// receivers' intervals.
const heartbeatFresh = "90 seconds"

// readPoolHeartbeats reads the endpoint's recent heartbeats through db. serving counts
// receivers ready with the manifest whose SHA-256 starts with manifestHash (the first
// part of the config_hash they write).
func readPoolHeartbeats(ctx context.Context, db *endpointDB, url, schema, endpoint, manifestHash string) (hb poolHeartbeats, err error) {
	err = db.read(ctx, url, func(ctx context.Context, conn *pgx.Conn) error {
		err := conn.QueryRow(ctx, `SELECT
  count(*) FILTER (WHERE ready AND config_hash LIKE $2 || '-%'),
  count(*),
  coalesce(string_agg(DISTINCT detail, '; ') FILTER (WHERE detail <> ''), '')
FROM `+store.TablesIn(schema).ReceiverHeartbeats+`
WHERE endpoint = $1 AND seen_at > now() - interval '`+heartbeatFresh+`'`, endpoint, manifestHash).Scan(&hb.serving, &hb.reporting, &hb.detail)
		if err != nil {
			return fmt.Errorf("read heartbeats: %w", err)
		}
		return nil
	})
	return hb, err
}

// poolChanges enqueues the endpoints a change of their pool concerns. A created or
// deleted pool, a new spec, public URL or ReceiverAvailable condition concern all the
// endpoints that name it; any other status update only the endpoints whose entry in
// status.endpoints changed. The pool's status changes with each member's, so
// re-reconciling every member each time cost n² reconciles for n endpoints.
func (r *WebhookEndpointReconciler) poolChanges() handler.EventHandler {
	all := func(ctx context.Context, obj client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		for _, req := range r.endpointsOfPool(ctx, obj) {
			q.Add(req)
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			all(ctx, e.Object, q)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			all(ctx, e.Object, q)
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			all(ctx, e.Object, q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			oldPool, okOld := e.ObjectOld.(*v1alpha1.WebhookReceiverPool)
			newPool, okNew := e.ObjectNew.(*v1alpha1.WebhookReceiverPool)
			if !okOld || !okNew || poolChangeConcernsAll(oldPool, newPool) {
				all(ctx, e.ObjectNew, q)
				return
			}
			for _, name := range changedMembers(oldPool.Status.Endpoints, newPool.Status.Endpoints) {
				q.Add(reconcile.Request{NamespacedName: client.ObjectKey{Namespace: newPool.Namespace, Name: name}})
			}
		},
	}
}

// poolChangeConcernsAll: what every member reads of its pool changed (reconcilePooled).
func poolChangeConcernsAll(oldPool, newPool *v1alpha1.WebhookReceiverPool) bool {
	available := func(p *v1alpha1.WebhookReceiverPool) metav1.Condition {
		if c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionReceiverAvailable); c != nil {
			return metav1.Condition{Status: c.Status, Reason: c.Reason, Message: c.Message}
		}
		return metav1.Condition{}
	}
	return oldPool.Generation != newPool.Generation || available(oldPool) != available(newPool) ||
		oldPool.Status.PublicURL != newPool.Status.PublicURL
}

// changedMembers names the endpoints whose entry differs between two status.endpoints
// lists, or is in only one of them.
func changedMembers(before, after []v1alpha1.PoolMember) []string {
	old := make(map[string]v1alpha1.PoolMember, len(before))
	for _, m := range before {
		old[m.Name] = m
	}
	var names []string
	for _, m := range after {
		if prev, ok := old[m.Name]; !ok || prev != m {
			names = append(names, m.Name)
		}
		delete(old, m.Name)
	}
	for name := range old {
		names = append(names, name)
	}
	return names
}

// endpointsOfPool maps a pool to the endpoints that name it.
func (r *WebhookEndpointReconciler) endpointsOfPool(ctx context.Context, obj client.Object) []reconcile.Request {
	var list v1alpha1.WebhookEndpointList
	if err := r.List(ctx, &list, client.InNamespace(obj.GetNamespace())); err != nil {
		log.FromContext(ctx).Error(err, "list endpoints of a pool", "pool", obj.GetName())
		return nil
	}
	var reqs []reconcile.Request
	for _, ep := range list.Items {
		if ref := ep.Spec.Receiver.PoolRef; ref != nil && ref.Name == obj.GetName() {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&ep)})
		}
	}
	return reqs
}
