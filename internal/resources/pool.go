package resources

import (
	"bytes"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
)

// ComponentPoolReceiver is the component label of a pool's objects; it keeps a pool's
// pods apart from those of an endpoint with the same name.
const ComponentPoolReceiver = "pool-receiver"

// PoolEndpointsDir is where a pool's receivers read their endpoints: the mounted
// PoolEndpointsSecret, a NAME.json (the rendered endpoint, as config.EnvEndpoint holds
// it for a dedicated pod) and a NAME.env (its variables, one KEY=VALUE per line) per
// member. The kubelet updates the files in place, and the receivers pick changes up
// without a restart.
const PoolEndpointsDir = "/etc/hookkeeper/endpoints"

const poolEndpointsVolume = "endpoints"

// PoolName names the Deployment, Service, ServiceAccount, PDB, HPA and NetworkPolicy of the pool
// named pool.
func PoolName(pool string) string {
	return boundedName(pool, "-pool")
}

// PoolEndpointsSecret names the Secret that holds the members of the pool named pool.
func PoolEndpointsSecret(pool string) string {
	return boundedName(pool, "-pool-endpoints")
}

// PoolLabels are the labels of every object owned by pool.
func PoolLabels(pool *v1alpha1.WebhookReceiverPool) map[string]string {
	l := PoolSelectorLabels(pool)
	l[LabelManagedBy], l[LabelPartOf] = ManagedBy, AppName
	return l
}

// PoolSelectorLabels select the pool's receiver pods.
func PoolSelectorLabels(pool *v1alpha1.WebhookReceiverPool) map[string]string {
	return map[string]string{
		LabelName:      AppName,
		LabelInstance:  boundedName(pool.Name, ""),
		LabelComponent: ComponentPoolReceiver,
	}
}

// PoolPath is where a pool serves the endpoint: /<name> followed by its
// spec.receiver.path.
func PoolPath(ep *v1alpha1.WebhookEndpoint) string {
	p := ep.Spec.Receiver.Path
	if p == "" {
		p = v1alpha1.DefaultReceiverPath
	}
	return "/" + ep.Name + p
}

// ServedBy names the Service in ep's namespace that serves ep (its own receivers', or
// its pool's) and the path ep is served at behind it.
func ServedBy(ep *v1alpha1.WebhookEndpoint) (service, path string) {
	if ref := ep.Spec.Receiver.PoolRef; ref != nil {
		return PoolName(ref.Name), PoolPath(ep)
	}
	path = ep.Spec.Receiver.Path
	if path == "" {
		path = v1alpha1.DefaultReceiverPath
	}
	return ReceiverName(ep), path
}

// PoolURL is the in-cluster base URL of the pool's Service.
func PoolURL(pool *v1alpha1.WebhookReceiverPool) string {
	return fmt.Sprintf("http://%s.%s.svc", PoolName(pool.Name), pool.Namespace)
}

// PoolReceivers are the pool's receivers: they read their endpoints from the mounted
// PoolEndpointsSecret, so a member added, changed or removed reaches them without a
// rollout; only a change to the pool itself rolls its pods.
func PoolReceivers(pool *v1alpha1.WebhookReceiverPool, opts Options) Receivers {
	spec := pool.Spec.DeepCopy()
	spec.Default()
	return Receivers{
		Name: PoolName(pool.Name), Namespace: pool.Namespace,
		Labels: PoolLabels(pool), Selector: PoolSelectorLabels(pool),
		Image:       image(spec.Image, opts),
		Replicas:    *spec.Replicas,
		Autoscaling: spec.Autoscaling,
		Resources:   receiverResources(spec.Resources),
		Args: []string{"--endpoints-dir=" + PoolEndpointsDir,
			fmt.Sprintf("--pool-max-in-flight=%d", spec.MaxInFlight)},
		Env: []corev1.EnvVar{
			{Name: config.EnvPodIP, ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.podIP"},
			}},
			{Name: config.EnvPodName, ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"},
			}},
			{Name: config.EnvPool, Value: pool.Name},
		},
		Volumes: []corev1.Volume{{
			Name: poolEndpointsVolume,
			VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName:  PoolEndpointsSecret(pool.Name),
				DefaultMode: ptr.To[int32](0o440),
			}},
		}},
		Mounts:  []corev1.VolumeMount{{Name: poolEndpointsVolume, MountPath: PoolEndpointsDir, ReadOnly: true}},
		FSGroup: ptr.To[int64](runAsID),

		NetworkPolicySpec: spec.NetworkPolicy,
	}
}

// PoolMemberConfig is one member endpoint as its pool's receivers load it.
type PoolMemberConfig struct {
	// Name of the WebhookEndpoint.
	Name string
	// Rendered is the endpoint as Render returns it.
	Rendered Rendered
	// Env holds the values of the variables a dedicated pod would get: every
	// Rendered.Refs env var, and config.EnvSinkURL for a Service sink.
	Env map[string]string
}

// PoolMember gathers what a pool's receivers need to serve ep: its rendered config
// and the values of the Secret keys it references (values maps "secret/key" to the
// value, as the reconciler reads them). An error says what a person must fix.
func PoolMember(ep *v1alpha1.WebhookEndpoint, rendered Rendered, values map[string][]byte) (PoolMemberConfig, error) {
	env := map[string]string{}
	if u := SinkURL(ep); u != "" {
		env[config.EnvSinkURL] = u
	}
	for _, ref := range rendered.Refs {
		v, ok := values[ref.Name+"/"+ref.Key]
		if !ok {
			return PoolMemberConfig{}, fmt.Errorf("key %q of Secret %s (%s) was not read", ref.Key, ref.Name, ref.Field)
		}
		if bytes.ContainsAny(v, "\r\n") {
			return PoolMemberConfig{}, fmt.Errorf("key %q of Secret %s (%s) holds a line break, which a pool's endpoints file cannot carry; remove it or serve the endpoint from its own receivers",
				ref.Key, ref.Name, ref.Field)
		}
		env[ref.EnvVar] = string(v)
	}
	return PoolMemberConfig{Name: ep.Name, Rendered: rendered, Env: env}, nil
}

// PoolEndpoints is the Secret a pool's receivers read their members from (see
// PoolEndpointsDir). It holds copies of the members' Secret values, in the members'
// own namespace; the receivers need no API access.
func PoolEndpoints(pool *v1alpha1.WebhookReceiverPool, members []PoolMemberConfig) *corev1.Secret {
	data := make(map[string][]byte, 2*len(members))
	for _, m := range members {
		data[m.Name+".json"] = append([]byte(nil), m.Rendered.JSON...)
		keys := make([]string, 0, len(m.Env))
		for k := range m.Env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var env strings.Builder
		for _, k := range keys {
			env.WriteString(k + "=" + m.Env[k] + "\n")
		}
		data[m.Name+".env"] = []byte(env.String())
	}
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name: PoolEndpointsSecret(pool.Name), Namespace: pool.Namespace, Labels: PoolLabels(pool),
		},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
}
