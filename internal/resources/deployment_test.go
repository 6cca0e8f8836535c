package resources

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
)

func TestDeployment(t *testing.T) {
	for _, tc := range []struct {
		name         string
		mutate       func(*v1alpha1.WebhookEndpoint)
		at           time.Time
		wantReplicas int32
		wantSecrets  []string // keys in env order
		wantImage    string
		wantCPU      string
		wantSink     string
	}{
		{name: "two active secrets", at: now, wantReplicas: 2, wantSecrets: []string{"current", "previous"},
			wantImage: "ghcr.io/hookkeeper/hookkeeper:test", wantCPU: "100m"},
		{name: "previous expired", at: now.Add(2 * time.Hour), wantReplicas: 2, wantSecrets: []string{"current"},
			wantImage: "ghcr.io/hookkeeper/hookkeeper:test", wantCPU: "100m"},
		{name: "all expired scales to zero", at: now.Add(2 * time.Hour), wantReplicas: 0,
			mutate: func(ep *v1alpha1.WebhookEndpoint) {
				ep.Spec.SigningSecrets = ep.Spec.SigningSecrets[1:]
			},
			wantImage: "ghcr.io/hookkeeper/hookkeeper:test", wantCPU: "100m"},
		{name: "overrides", at: now, wantReplicas: 1, wantSecrets: []string{"current", "previous"},
			mutate: func(ep *v1alpha1.WebhookEndpoint) {
				ep.Spec.Receiver.Replicas = ptr.To[int32](1)
				ep.Spec.Receiver.Image = "example.com/custom:1"
				ep.Spec.Receiver.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}}
				ep.Spec.Delivery.Sink = v1alpha1.SinkSpec{ServiceRef: &v1alpha1.ServiceReference{Name: "app", Port: 8080, Path: "/in"}}
			},
			wantImage: "example.com/custom:1", wantCPU: "250m", wantSink: "http://app.shop.svc:8080/in"},
		{name: "unset replicas default", at: now, wantReplicas: v1alpha1.DefaultReplicas, wantSecrets: []string{"current", "previous"},
			mutate:    func(ep *v1alpha1.WebhookEndpoint) { ep.Spec.Receiver.Replicas = nil },
			wantImage: "ghcr.io/hookkeeper/hookkeeper:test", wantCPU: "100m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := endpoint()
			if tc.mutate != nil {
				tc.mutate(ep)
			}
			d := Deployment(ep, options(t, ep, tc.at))
			if d.Name != "orders-receiver" || d.Namespace != "shop" {
				t.Errorf("name = %s/%s", d.Namespace, d.Name)
			}
			if *d.Spec.Replicas != tc.wantReplicas {
				t.Errorf("replicas = %d, want %d", *d.Spec.Replicas, tc.wantReplicas)
			}
			pod := d.Spec.Template.Spec
			if d.Spec.Template.Annotations[AnnotationConfigHash] != "abc" {
				t.Errorf("config hash annotation = %v", d.Spec.Template.Annotations)
			}
			for k, v := range d.Spec.Selector.MatchLabels {
				if d.Spec.Template.Labels[k] != v {
					t.Errorf("selector %s=%s does not match the template", k, v)
				}
			}
			if pod.ServiceAccountName != "orders-receiver" {
				t.Errorf("service account = %q", pod.ServiceAccountName)
			}
			if *pod.AutomountServiceAccountToken {
				t.Error("the receiver must not mount an API token")
			}
			psc := pod.SecurityContext
			if !*psc.RunAsNonRoot || *psc.RunAsUser != 65532 || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("pod security context = %+v", psc)
			}
			if len(pod.Containers) != 1 {
				t.Fatalf("containers = %d", len(pod.Containers))
			}
			c := pod.Containers[0]
			sc := c.SecurityContext
			if !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || !*sc.RunAsNonRoot ||
				len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) != 0 {
				t.Errorf("container security context = %+v", sc)
			}
			if c.Image != tc.wantImage || strings.Join(c.Command, " ") != "/hookkeeper-receiver" ||
				strings.Join(c.Args, " ") != "receiver --drain-delay=5s --shutdown-timeout=20s" {
				t.Errorf("image %q command %v args %v", c.Image, c.Command, c.Args)
			}
			if c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
				t.Errorf("terminationMessagePolicy = %q: a receiver that fails to start would leave no cause in its pod's status", c.TerminationMessagePolicy)
			}
			// Drain and in-flight shutdown must end before the kubelet's SIGKILL.
			if grace := *d.Spec.Template.Spec.TerminationGracePeriodSeconds; grace < 5+20 {
				t.Errorf("terminationGracePeriodSeconds %d is shorter than drain (5s) + shutdown (20s)", grace)
			}
			if got := c.Resources.Requests.Cpu().String(); got != tc.wantCPU {
				t.Errorf("cpu request = %s, want %s", got, tc.wantCPU)
			}
			if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/healthz" ||
				c.ReadinessProbe.HTTPGet.Port.StrVal != PortNameMetrics {
				t.Errorf("probes = %+v %+v", c.ReadinessProbe.HTTPGet, c.LivenessProbe.HTTPGet)
			}
			ports := map[string]int32{}
			for _, p := range c.Ports {
				ports[p.Name] = p.ContainerPort
			}
			if ports[PortNameHTTP] != config.WebhookPort || ports[PortNameMetrics] != config.AdminPort {
				t.Errorf("ports = %v", ports)
			}
			env := map[string]corev1.EnvVar{}
			var secretKeys []string
			for _, e := range c.Env {
				env[e.Name] = e
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && strings.HasPrefix(e.Name, config.EnvSigningSecretPrefix) {
					secretKeys = append(secretKeys, e.ValueFrom.SecretKeyRef.Key)
					if e.Name != config.EnvSigningSecretPrefix+jsonNumber(int64(len(secretKeys)-1)) {
						t.Errorf("signing secret env %s out of order", e.Name)
					}
				}
				if e.Value != "" && strings.Contains(e.Value, "whsec") {
					t.Errorf("env %s carries a secret value", e.Name)
				}
			}
			if strings.Join(secretKeys, ",") != strings.Join(tc.wantSecrets, ",") {
				t.Errorf("signing secret keys = %v, want %v", secretKeys, tc.wantSecrets)
			}
			if e := env[config.EnvDatabaseURL]; e.ValueFrom == nil || e.ValueFrom.SecretKeyRef.Name != "db-app" || e.ValueFrom.SecretKeyRef.Key != "uri" {
				t.Errorf("DATABASE_URL = %+v", e)
			}
			if e := env[config.EnvPodIP]; e.ValueFrom == nil || e.ValueFrom.FieldRef.FieldPath != "status.podIP" {
				t.Errorf("POD_IP = %+v", e)
			}
			expectGoMaxProcs(t, env["GOMAXPROCS"])
			if got := env[config.EnvSinkURL].Value; got != tc.wantSink {
				t.Errorf("sink URL = %q, want %q", got, tc.wantSink)
			}
			var rendered struct {
				Spec v1alpha1.WebhookEndpointSpec `json:"spec"`
			}
			if err := json.Unmarshal([]byte(env[config.EnvEndpoint].Value), &rendered); err != nil {
				t.Fatalf("endpoint env: %v", err)
			}
			if len(rendered.Spec.SigningSecrets) != len(tc.wantSecrets) {
				t.Errorf("rendered spec has %d signing secrets, env has %d", len(rendered.Spec.SigningSecrets), len(tc.wantSecrets))
			}
			for i, s := range rendered.Spec.SigningSecrets {
				if s.SecretKeyRef.Key != tc.wantSecrets[i] {
					t.Errorf("rendered secret %d = %s, env has %s", i, s.SecretKeyRef.Key, tc.wantSecrets[i])
				}
			}
		})
	}
}

// expectGoMaxProcs checks that GOMAXPROCS is the receiver container's CPU request in
// whole CPUs (the kubelet rounds up), so Go runs one processor per requested core.
func expectGoMaxProcs(t *testing.T, e corev1.EnvVar) {
	t.Helper()
	ref := e.ValueFrom
	if ref == nil || ref.ResourceFieldRef == nil {
		t.Fatalf("GOMAXPROCS = %+v, want the CPU request through resourceFieldRef", e)
	}
	if r := ref.ResourceFieldRef; r.ContainerName != ContainerReceiver || r.Resource != "requests.cpu" || r.Divisor.Cmp(resource.MustParse("1")) != 0 {
		t.Errorf("GOMAXPROCS resourceFieldRef = %+v, want requests.cpu of %q in whole CPUs", r, ContainerReceiver)
	}
}

func TestPoolDeploymentSizesGoMaxProcs(t *testing.T) {
	pool := &v1alpha1.WebhookReceiverPool{ObjectMeta: metav1.ObjectMeta{Name: "shared", Namespace: "hooks"}}
	d := PoolReceivers(pool, Options{Image: "ghcr.io/hookkeeper/hookkeeper:test"}).Deployment()
	env := map[string]corev1.EnvVar{}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if _, dup := env[e.Name]; dup {
			t.Errorf("env %s set twice", e.Name)
		}
		env[e.Name] = e
	}
	expectGoMaxProcs(t, env["GOMAXPROCS"])
}
