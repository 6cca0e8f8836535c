package resources

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
)

// Options are the inputs a builder needs beyond the endpoint itself.
type Options struct {
	// Image of the receiver and migration containers unless spec.receiver.image is set.
	Image string
	// Rendered is the receiver's view of the endpoint (see Render).
	Rendered Rendered
	// ConfigHash goes into the pod template (see ConfigHash).
	ConfigHash string
}

// Container and port names.
const (
	ContainerReceiver = "receiver"
	ContainerMigrate  = "migrate"
	PortNameHTTP      = "http"
	PortNameMetrics   = "metrics"
	ServicePortHTTP   = 80
	runAsID           = 65532
	tmpVolume         = "tmp"
)

// ReceiverCommand is the entrypoint of receiver and migration containers: the
// data-plane binary of the hookkeeper image (cmd/hookkeeper-receiver), which links
// neither client-go nor controller-runtime, so a receiver pod's memory holds only what
// it runs. The image's own entrypoint, /hookkeeper, is the operator's.
var ReceiverCommand = []string{"/hookkeeper-receiver"}

// image is the image receiver pods run: override (spec.receiver.image or a pool's
// spec.image) or the operator's.
func image(override string, opts Options) string {
	if override != "" {
		return override
	}
	return opts.Image
}

// defaultResources apply when spec.receiver.resources is empty, from `make bench`'s
// measurement of hookkeeper-receiver (docs/operations.md, "Receiver memory"): peak RSS
// 35.7 MiB with 32 requests in flight. The request is that with a third more; the limit
// adds room for maxInFlight (64) bodies of 1 MiB, the default maxBodyBytes, so a
// burst of large bodies is not an OOM kill, and a leak still cannot take the node.
func defaultResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse(DefaultReceiverCPURequest),
			corev1.ResourceMemory: resource.MustParse(DefaultReceiverMemoryRequest),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceMemory: resource.MustParse(DefaultReceiverMemoryLimit),
		},
	}
}

// The default CPU request and memory of receiver and migration pods; see
// defaultResources.
const (
	DefaultReceiverCPURequest    = "100m"
	DefaultReceiverMemoryRequest = "48Mi"
	DefaultReceiverMemoryLimit   = "128Mi"
)

// receiverResources are r, or defaultResources when r is empty.
func receiverResources(r corev1.ResourceRequirements) corev1.ResourceRequirements {
	if len(r.Requests) == 0 && len(r.Limits) == 0 && len(r.Claims) == 0 {
		return defaultResources()
	}
	return *r.DeepCopy()
}

// podSecurityContext and containerSecurityContext harden every pod the operator runs:
// non-root, no privilege escalation, no capabilities, read-only root, RuntimeDefault
// seccomp (the restricted Pod Security Standard).
func podSecurityContext() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To[int64](runAsID),
		RunAsGroup:     ptr.To[int64](runAsID),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

func containerSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsNonRoot:             ptr.To(true),
		RunAsUser:                ptr.To[int64](runAsID),
		RunAsGroup:               ptr.To[int64](runAsID),
		ReadOnlyRootFilesystem:   ptr.To(true),
		AllowPrivilegeEscalation: ptr.To(false),
		Privileged:               ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// tmpVolumes give the read-only container a writable, size-capped /tmp.
func tmpVolumes() ([]corev1.Volume, []corev1.VolumeMount) {
	vols := []corev1.Volume{{
		Name: tmpVolume,
		VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			SizeLimit: ptr.To(resource.MustParse("16Mi")),
		}},
	}}
	mounts := []corev1.VolumeMount{{Name: tmpVolume, MountPath: "/tmp"}}
	return vols, mounts
}

// secretEnv reads one Secret key; the key is required, so a pod never starts with an
// empty secret (fail closed).
func secretEnv(ref SecretRef) corev1.EnvVar {
	return corev1.EnvVar{
		Name: ref.EnvVar,
		ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: ref.Name},
			Key:                  ref.Key,
			Optional:             ptr.To(false),
		}},
	}
}

// databaseRef is the DATABASE_URL reference among the rendered refs.
func databaseRef(ep *v1alpha1.WebhookEndpoint) SecretRef {
	return SecretRef{
		Field:  "spec.database.urlSecretRef",
		Name:   ep.Spec.Database.URLSecretRef.Name,
		Key:    ep.Spec.Database.URLSecretRef.Key,
		EnvVar: config.EnvDatabaseURL,
	}
}
