package resources

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
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

// Deployment is the receiver Deployment of ep.
func Deployment(ep *v1alpha1.WebhookEndpoint, opts Options) *appsv1.Deployment {
	labels := Labels(ep, ComponentReceiver)
	vols, mounts := tmpVolumes()
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
	return &appsv1.Deployment{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{
			Name: ReceiverName(ep), Namespace: ep.Namespace, Labels: labels,
		},
		Spec: appsv1.DeploymentSpec{
			Replicas:             ptr.To(Replicas(ep, opts)),
			RevisionHistoryLimit: ptr.To[int32](3),
			Selector:             &metav1.LabelSelector{MatchLabels: SelectorLabels(ep)},
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
					Labels:      labels,
					Annotations: map[string]string{AnnotationConfigHash: opts.ConfigHash},
				},
				Spec: corev1.PodSpec{
					ServiceAccountName:            ReceiverName(ep),
					AutomountServiceAccountToken:  ptr.To(false),
					EnableServiceLinks:            ptr.To(false),
					SecurityContext:               podSecurityContext(),
					TerminationGracePeriodSeconds: ptr.To(int64(receiverGracePeriod.Seconds())),
					// Spread replicas over nodes when the scheduler can, so one node going
					// away does not take every receiver with it.
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
						MaxSkew:           1,
						TopologyKey:       corev1.LabelHostname,
						WhenUnsatisfiable: corev1.ScheduleAnyway,
						LabelSelector:     &metav1.LabelSelector{MatchLabels: SelectorLabels(ep)},
					}},
					Volumes: vols,
					Containers: []corev1.Container{{
						Name:  ContainerReceiver,
						Image: image(ep, opts),
						// After SIGTERM the pod keeps serving for the drain delay with
						// /readyz failing, so Services, Gateways and Ingress controllers stop
						// routing to it before the listener closes: no delivery meets a
						// refused connection during a rollout. Drain plus in-flight
						// shutdown stays inside the grace period.
						Command: ReceiverCommand,
						Args: []string{"receiver",
							"--drain-delay=" + ReceiverDrainDelay.String(),
							"--shutdown-timeout=" + receiverShutdownTimeout.String()},
						// A receiver that fails to start writes why (credentials removed)
						// to its termination message, which the operator reads into
						// ReceiverAvailable=False CrashLooping; the log's tail otherwise.
						TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
						Ports: []corev1.ContainerPort{
							{Name: PortNameHTTP, ContainerPort: config.WebhookPort, Protocol: corev1.ProtocolTCP},
							{Name: PortNameMetrics, ContainerPort: config.AdminPort, Protocol: corev1.ProtocolTCP},
						},
						Env:             receiverEnv(ep, opts),
						Resources:       receiverResources(ep),
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

// ReceiverDrainDelay is how long a terminating receiver keeps serving with /readyz
// failing; receiverShutdownTimeout bounds the in-flight requests after that, and the
// grace period covers both with a margin before the kubelet's SIGKILL.
const (
	ReceiverDrainDelay      = 5 * time.Second
	receiverShutdownTimeout = 20 * time.Second
	receiverGracePeriod     = ReceiverDrainDelay + receiverShutdownTimeout + 5*time.Second
)
