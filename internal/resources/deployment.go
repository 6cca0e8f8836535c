package resources

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
)

// Replicas is the number of receiver pods: zero when no signing secret is active, so no
// pod verifies with an expired secret and providers keep retrying until one is added
// (fail closed, nothing lost).
func Replicas(ep *v1alpha1.WebhookEndpoint, opts Options) int32 {
	if len(opts.Rendered.ActiveSecrets) == 0 {
		return 0
	}
	if ep.Spec.Receiver.Replicas == nil {
		return v1alpha1.DefaultReplicas
	}
	return *ep.Spec.Receiver.Replicas
}

// SinkURL is the delivery URL when the sink is an in-cluster Service reference, empty
// when spec.delivery.sink.url is used as is.
func SinkURL(ep *v1alpha1.WebhookEndpoint) string {
	ref := ep.Spec.Delivery.Sink.ServiceRef
	if ref == nil {
		return ""
	}
	return ref.URL(ep.Namespace)
}

// receiverEnv is the receiver's environment: the rendered endpoint, every referenced
// Secret key through secretKeyRef (never a value in the pod spec) and the pod IP.
func receiverEnv(ep *v1alpha1.WebhookEndpoint, opts Options) []corev1.EnvVar {
	env := []corev1.EnvVar{
		{Name: config.EnvEndpoint, Value: string(opts.Rendered.JSON)},
		{Name: config.EnvPodIP, ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.podIP"},
		}},
	}
	if u := SinkURL(ep); u != "" {
		env = append(env, corev1.EnvVar{Name: config.EnvSinkURL, Value: u})
	}
	for _, ref := range opts.Rendered.Refs {
		env = append(env, secretEnv(ref))
	}
	return env
}

// Receivers describes one Deployment of receiver pods and the objects around it:
// an endpoint's own (EndpointReceivers) or a pool's (PoolReceivers). The builders
// below (Deployment, Service, ServiceAccount, PodDisruptionBudget,
// HorizontalPodAutoscaler, NetworkPolicy) read only this, so both are built by the
// same code.
type Receivers struct {
	// Name of the Deployment, Service, ServiceAccount, PDB, HPA and NetworkPolicy.
	Name, Namespace string
	// Labels go on every object; Selector selects the pods (immutable).
	Labels, Selector map[string]string
	Image            string
	// Replicas when Autoscaling is nil.
	Replicas    int32
	Autoscaling *v1alpha1.AutoscalingSpec
	Resources   corev1.ResourceRequirements
	// Args follow "receiver" and the drain and shutdown flags.
	Args []string
	Env  []corev1.EnvVar
	// Volumes and Mounts beyond /tmp.
	Volumes []corev1.Volume
	Mounts  []corev1.VolumeMount
	// FSGroup owns mounted Secret files, so the non-root receiver can read them.
	FSGroup *int64
	// ConfigHash, when set, annotates the pod template so a change rolls the pods.
	ConfigHash string
	// NetworkPolicySpec fences the pods (NetworkPolicy).
	NetworkPolicySpec v1alpha1.NetworkPolicySpec
}

// EndpointReceivers are ep's own receivers: the rendered config and the Secret keys in
// the environment, rolled when their hash changes.
func EndpointReceivers(ep *v1alpha1.WebhookEndpoint, opts Options) Receivers {
	autoscaling := ep.Spec.Receiver.Autoscaling
	if len(opts.Rendered.ActiveSecrets) == 0 {
		// Scaled to zero, fail closed (Replicas): no autoscaler may bring pods back.
		autoscaling = nil
	}
	return Receivers{
		Name: ReceiverName(ep), Namespace: ep.Namespace,
		Labels: Labels(ep, ComponentReceiver), Selector: SelectorLabels(ep),
		Image:       image(ep.Spec.Receiver.Image, opts),
		Replicas:    Replicas(ep, opts),
		Autoscaling: autoscaling,
		Resources:   receiverResources(ep.Spec.Receiver.Resources),
		Env:         receiverEnv(ep, opts),
		ConfigHash:  opts.ConfigHash,

		NetworkPolicySpec: ep.Spec.NetworkPolicy,
	}
}

// Deployment is the receiver Deployment of ep.
func Deployment(ep *v1alpha1.WebhookEndpoint, opts Options) *appsv1.Deployment {
	return EndpointReceivers(ep, opts).Deployment()
}

// objectMeta names every object of the receivers: Name in Namespace, with Labels.
func (r Receivers) objectMeta() metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: r.Name, Namespace: r.Namespace, Labels: r.Labels}
}

// Deployment is the receivers' Deployment. With Autoscaling its replicas are left
// unset, so the HorizontalPodAutoscaler owns them and the operator never fights it.
func (r Receivers) Deployment() *appsv1.Deployment {
	vols, mounts := tmpVolumes()
	vols, mounts = append(vols, r.Volumes...), append(mounts, r.Mounts...)
	probe := func(path string, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: path, Port: intstr.FromString(PortNameMetrics), Scheme: corev1.URISchemeHTTP,
			}},
			PeriodSeconds:    5,
			TimeoutSeconds:   2,
			FailureThreshold: failures,
			SuccessThreshold: 1,
		}
	}
	var replicas *int32
	if r.Autoscaling == nil {
		replicas = ptr.To(r.Replicas)
	}
	var annotations map[string]string
	if r.ConfigHash != "" {
		annotations = map[string]string{AnnotationConfigHash: r.ConfigHash}
	}
	podSecurity := podSecurityContext()
	podSecurity.FSGroup = r.FSGroup
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: r.objectMeta(),
		Spec: appsv1.DeploymentSpec{
			Replicas:             replicas,
			RevisionHistoryLimit: ptr.To[int32](3),
			Selector:             &metav1.LabelSelector{MatchLabels: r.Selector},
			Strategy: appsv1.DeploymentStrategy{
				Type: appsv1.RollingUpdateDeploymentStrategyType,
				// Keep every ready pod until its replacement is ready: a rotation never
				// lowers capacity.
				RollingUpdate: &appsv1.RollingUpdateDeployment{
					MaxUnavailable: ptr.To(intstr.FromInt32(0)),
					MaxSurge:       ptr.To(intstr.FromInt32(1)),
				},
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      r.Labels,
					Annotations: annotations,
				},
				Spec: corev1.PodSpec{
					ServiceAccountName:            r.Name,
					AutomountServiceAccountToken:  ptr.To(false),
					EnableServiceLinks:            ptr.To(false),
					SecurityContext:               podSecurity,
					TerminationGracePeriodSeconds: ptr.To(int64(receiverGracePeriod.Seconds())),
					// Spread replicas over nodes when the scheduler can, so one node going
					// away does not take every receiver with it.
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
						MaxSkew:           1,
						TopologyKey:       corev1.LabelHostname,
						WhenUnsatisfiable: corev1.ScheduleAnyway,
						LabelSelector:     &metav1.LabelSelector{MatchLabels: r.Selector},
					}},
					Volumes: vols,
					Containers: []corev1.Container{{
						Name:  ContainerReceiver,
						Image: r.Image,
						// After SIGTERM the pod keeps serving for the drain delay with
						// /readyz failing, so Services, Gateways and Ingress controllers stop
						// routing to it before the listener closes: no delivery meets a
						// refused connection during a rollout. Drain plus in-flight
						// shutdown stays inside the grace period.
						Command: ReceiverCommand,
						Args: append([]string{"receiver",
							"--drain-delay=" + ReceiverDrainDelay.String(),
							"--shutdown-timeout=" + receiverShutdownTimeout.String()}, r.Args...),
						// A receiver that fails to start writes why (credentials removed)
						// to its termination message, which the operator reads into
						// ReceiverAvailable=False CrashLooping; the log's tail otherwise.
						TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
						Ports: []corev1.ContainerPort{
							{Name: PortNameHTTP, ContainerPort: config.WebhookPort, Protocol: corev1.ProtocolTCP},
							{Name: PortNameMetrics, ContainerPort: config.AdminPort, Protocol: corev1.ProtocolTCP},
						},
						Env:             append([]corev1.EnvVar{goMaxProcs()}, r.Env...),
						Resources:       r.Resources,
						ReadinessProbe:  probe("/readyz", 3),
						LivenessProbe:   probe("/healthz", 6),
						SecurityContext: containerSecurityContext(),
						VolumeMounts:    mounts,
						ImagePullPolicy: corev1.PullIfNotPresent,
					}},
				},
			},
		},
	}
}

// goMaxProcs sizes the receiver's Go scheduler to the CPU its pod requests, rounded up
// (the downward API rounds CPU up to the divisor): one processor for the default 100m.
// Go's own default is the node's cores (it follows a CPU limit, receivers have none), and
// a receiver keeps few of them busy: with more processors than work, idle ones spin and
// wake each other through futexes between requests. make bench measured the receiver
// process at 1 to 8 requests in flight with GOMAXPROCS=1 against Go's default on 2
// cores (docs/benchmarks.md, "The receiver's processors"). A request of 0 (none set)
// gives "0", which Go ignores: its default applies.
func goMaxProcs() corev1.EnvVar {
	return corev1.EnvVar{Name: "GOMAXPROCS", ValueFrom: &corev1.EnvVarSource{
		ResourceFieldRef: &corev1.ResourceFieldSelector{
			ContainerName: ContainerReceiver,
			Resource:      "requests.cpu",
			Divisor:       resource.MustParse("1"),
		},
	}}
}

// ReceiverDrainDelay is how long a terminating receiver keeps serving with /readyz
// failing; receiverShutdownTimeout bounds the in-flight requests after that, and the
// grace period covers both with a margin before the kubelet's SIGKILL.
const (
	ReceiverDrainDelay      = 5 * time.Second
	receiverShutdownTimeout = 20 * time.Second
	receiverGracePeriod     = ReceiverDrainDelay + receiverShutdownTimeout + 5*time.Second
)
