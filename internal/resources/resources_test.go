package resources

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/metrics"
	"github.com/hookkeeper/hookkeeper/internal/store"
)

var now = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

func at(t time.Time) *metav1.Time { mt := metav1.NewTime(t); return &mt }

func sel(name, key string) corev1.SecretKeySelector {
	return corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
}

func endpoint() *v1alpha1.WebhookEndpoint {
	return &v1alpha1.WebhookEndpoint{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop", Generation: 3, ResourceVersion: "77"},
		Spec: v1alpha1.WebhookEndpointSpec{
			Provider: v1alpha1.ProviderSpec{Type: v1alpha1.ProviderStripe},
			SigningSecrets: []v1alpha1.SigningSecret{
				{SecretKeyRef: sel("stripe", "current")},
				{SecretKeyRef: sel("stripe", "previous"), ExpiresAt: at(now.Add(time.Hour))},
			},
			Database: v1alpha1.DatabaseSpec{URLSecretRef: sel("db-app", "uri"), Schema: "hookkeeper"},
			StateMachine: v1alpha1.StateMachineSpec{
				Initial: "pending", States: []string{"pending", "paid"},
				Transitions: []v1alpha1.Transition{{Name: "pay", On: []string{"paid"}, From: []string{"pending"}, To: "paid"}},
			},
			Delivery: v1alpha1.DeliverySpec{Sink: v1alpha1.SinkSpec{URL: "http://app.shop.svc/events"}},
			Receiver: v1alpha1.ReceiverSpec{Replicas: ptr.To[int32](2), Path: "/stripe"},
		},
	}
}

func options(t *testing.T, ep *v1alpha1.WebhookEndpoint, at time.Time) Options {
	t.Helper()
	r, err := Render(ep, at)
	if err != nil {
		t.Fatal(err)
	}
	return Options{Image: "ghcr.io/hookkeeper/hookkeeper:test", Rendered: r, ConfigHash: "abc"}
}

func TestBoundedNames(t *testing.T) {
	long := strings.Repeat("a", 200)
	for _, tc := range []struct{ base, suffix string }{
		{"orders", "-receiver"}, {long, "-receiver"}, {long, "-migrate-v1"}, {long + "b", "-receiver"},
		{strings.Repeat("x", 54), "-receiver"}, {strings.Repeat("x", 55), "-receiver"},
	} {
		got := boundedName(tc.base, tc.suffix)
		if len(got) > maxNameLength || !strings.HasSuffix(got, tc.suffix) {
			t.Errorf("boundedName(%d chars, %q) = %q (%d chars)", len(tc.base), tc.suffix, got, len(got))
		}
	}
	if boundedName(long, "-receiver") == boundedName(long+"b", "-receiver") {
		t.Error("distinct long names must stay distinct")
	}
	if got := boundedName("orders", "-receiver"); got != "orders-receiver" {
		t.Errorf("short name changed: %q", got)
	}
	ep := endpoint()
	if got, want := MigrationJobName(ep), "orders-migrate-v"; !strings.HasPrefix(got, want) ||
		!strings.HasSuffix(got, "v"+jsonNumber(store.SchemaVersion)) {
		t.Errorf("MigrationJobName = %q", got)
	}
}

func jsonNumber(n int64) string { b, _ := json.Marshal(n); return string(b) }

func TestRenderDropsExpiredSecretsAndRenumbers(t *testing.T) {
	ep := endpoint()
	ep.Spec.SigningSecrets = []v1alpha1.SigningSecret{
		{SecretKeyRef: sel("s", "old"), ExpiresAt: at(now.Add(-time.Minute))},
		{SecretKeyRef: sel("s", "current")},
		{SecretKeyRef: sel("s", "exact"), ExpiresAt: at(now)},
		{SecretKeyRef: sel("s", "next"), ExpiresAt: at(now.Add(time.Minute))},
	}
	ep.Spec.Delivery.SigningSecretRef = ptr.To(sel("deliver", "key"))
	r, err := Render(ep, now)
	if err != nil {
		t.Fatal(err)
	}
	wantRefs := []SecretRef{
		{Field: "spec.signingSecrets[1].secretKeyRef", Name: "s", Key: "current", EnvVar: config.EnvSigningSecretPrefix + "0"},
		{Field: "spec.signingSecrets[3].secretKeyRef", Name: "s", Key: "next", EnvVar: config.EnvSigningSecretPrefix + "1"},
		{Field: "spec.database.urlSecretRef", Name: "db-app", Key: "uri", EnvVar: config.EnvDatabaseURL},
		{Field: "spec.delivery.signingSecretRef", Name: "deliver", Key: "key", EnvVar: config.EnvDeliverySecret},
	}
	if len(r.Refs) != len(wantRefs) {
		t.Fatalf("refs = %+v", r.Refs)
	}
	for i := range wantRefs {
		if r.Refs[i] != wantRefs[i] {
			t.Errorf("ref %d = %+v, want %+v", i, r.Refs[i], wantRefs[i])
		}
	}
	var doc struct {
		APIVersion, Kind string
		Metadata         struct{ Name, Namespace, ResourceVersion string }
		Spec             v1alpha1.WebhookEndpointSpec
	}
	if err := json.Unmarshal(r.JSON, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.APIVersion != "hookkeeper.dev/v1alpha1" || doc.Kind != "WebhookEndpoint" ||
		doc.Metadata.Name != "orders" || doc.Metadata.Namespace != "shop" || doc.Metadata.ResourceVersion != "" {
		t.Errorf("rendered header = %+v", doc)
	}
	keys := []string{}
	for _, s := range doc.Spec.SigningSecrets {
		keys = append(keys, s.SecretKeyRef.Key)
	}
	if strings.Join(keys, ",") != "current,next" {
		t.Errorf("rendered signing secrets = %v, want current,next (index i is %s<i>)", keys, config.EnvSigningSecretPrefix)
	}
	if next, ok := NextExpiry(ep, now); !ok || !next.Equal(now.Add(time.Minute)) {
		t.Errorf("NextExpiry = %v %v", next, ok)
	}
	if _, ok := NextExpiry(ep, now.Add(time.Hour)); ok {
		t.Error("no expiry after the last one")
	}
	if got := SecretNames(ep); strings.Join(got, ",") != "db-app,deliver,s" {
		t.Errorf("SecretNames = %v", got)
	}
}

func TestConfigHash(t *testing.T) {
	ep := endpoint()
	r, _ := Render(ep, now)
	base := map[string][]byte{"stripe/current": []byte("whsec_a"), "stripe/previous": []byte("whsec_b"), "db-app/uri": []byte("postgres://x")}
	h0 := ConfigHash(testKey, r, base)
	with := func(k, v string) map[string][]byte {
		m := map[string][]byte{}
		for kk, vv := range base {
			m[kk] = vv
		}
		m[k] = []byte(v)
		return m
	}
	scaled := endpoint()
	scaled.Spec.Receiver.Replicas = ptr.To[int32](7)
	scaled.Spec.Receiver.Image = "other:1"
	scaled.Spec.NetworkPolicy.Enabled = ptr.To(false)
	scaled.Spec.Exposure = &v1alpha1.ExposureSpec{Ingress: &v1alpha1.IngressExposure{Host: "x.example"}}
	rs, _ := Render(scaled, now)
	if string(rs.JSON) != string(r.JSON) {
		t.Errorf("operator-only fields leak into the pods' config:\n%s\n%s", rs.JSON, r.JSON)
	}
	ep2 := endpoint()
	ep2.Spec.Receiver.Path = "/other"
	r2, _ := Render(ep2, now)
	for _, tc := range []struct {
		name   string
		hash   string
		differ bool
	}{
		{"same inputs", ConfigHash(testKey, r, base), false},
		{"unrelated key in a referenced Secret", ConfigHash(testKey, r, with("stripe/unrelated", "x")), false},
		{"rotated signing secret", ConfigHash(testKey, r, with("stripe/current", "whsec_c")), true},
		{"new database URL", ConfigHash(testKey, r, with("db-app/uri", "postgres://y")), true},
		{"config change", ConfigHash(testKey, r2, base), true},
		{"secret expired", func() string { r3, _ := Render(ep, now.Add(2*time.Hour)); return ConfigHash(testKey, r3, base) }(), true},
	} {
		if (tc.hash != h0) != tc.differ {
			t.Errorf("%s: hash differs=%v, want %v", tc.name, tc.hash != h0, tc.differ)
		}
	}
	if strings.Contains(h0, "whsec") || len(h0) != 64 {
		t.Errorf("hash %q is not a sha256 hex digest", h0)
	}
	// Keyed: without the per-install key the annotation is no digest anyone can
	// recompute from guessed values.
	if plain := unkeyedHash(8, configParts(r, base)...); h0 == plain {
		t.Error("ConfigHash is the plain SHA-256 of its inputs: weak secrets can be guessed offline")
	}
	if ConfigHash([]byte("another-install-key-0123456789ab"), r, base) == h0 {
		t.Error("ConfigHash does not depend on the key")
	}
}

// testKey stands for the per-install hash key.
var testKey = []byte("0123456789abcdef0123456789abcdef")

// unkeyedHash is SHA-256 over length-prefixed parts (n-byte big-endian lengths): what the
// rollout hashes were before they were keyed.
func unkeyedHash(n int, parts ...[]byte) string {
	h := sha256.New()
	for _, b := range parts {
		l := make([]byte, 8)
		binary.BigEndian.PutUint64(l, uint64(len(b)))
		h.Write(l[8-n:])
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// configParts are ConfigHash's inputs in order.
func configParts(r Rendered, values map[string][]byte) [][]byte {
	parts := [][]byte{r.JSON}
	for _, ref := range r.Refs {
		id := ref.Name + "/" + ref.Key
		parts = append(parts, []byte(ref.EnvVar), []byte(id), values[id])
	}
	return parts
}

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
		{name: "unset replicas default", at: now, wantReplicas: DefaultReplicas, wantSecrets: []string{"current", "previous"},
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
			if c.Image != tc.wantImage || strings.Join(c.Args, " ") != "receiver --drain-delay=5s --shutdown-timeout=20s" {
				t.Errorf("image %q args %v", c.Image, c.Args)
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

func TestMigrationJob(t *testing.T) {
	ep := endpoint()
	opts := options(t, ep, now)
	j := MigrationJob(ep, opts, MigrationHash(testKey, ep, opts, []byte("postgres://a")))
	if j.Name != MigrationJobName(ep) || j.Spec.TTLSecondsAfterFinished != nil || j.Spec.BackoffLimit == nil {
		t.Errorf("job %s ttl %v backoff %v", j.Name, j.Spec.TTLSecondsAfterFinished, j.Spec.BackoffLimit)
	}
	pod := j.Spec.Template.Spec
	c := pod.Containers[0]
	if strings.Join(c.Args, " ") != "migrate" || pod.RestartPolicy != corev1.RestartPolicyNever || *pod.AutomountServiceAccountToken {
		t.Errorf("args %v restart %s", c.Args, pod.RestartPolicy)
	}
	if !*c.SecurityContext.ReadOnlyRootFilesystem || c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
		t.Errorf("container = %+v", c)
	}
	names := []string{}
	for _, e := range c.Env {
		names = append(names, e.Name)
		if e.Name == config.EnvDatabaseURL && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef.Key != "uri") {
			t.Errorf("DATABASE_URL must come from the Secret: %+v", e)
		}
	}
	if strings.Join(names, ",") != config.EnvEndpoint+","+config.EnvDatabaseURL {
		t.Errorf("env = %v: the migration needs only the endpoint and the database", names)
	}
	h := MigrationHash(testKey, ep, opts, []byte("postgres://a"))
	for name, other := range map[string]string{
		"database URL": MigrationHash(testKey, ep, opts, []byte("postgres://b")),
		"schema": func() string {
			e := endpoint()
			e.Spec.Database.Schema = "other"
			return MigrationHash(testKey, e, opts, []byte("postgres://a"))
		}(),
		"image": MigrationHash(testKey, ep, Options{Image: "other"}, []byte("postgres://a")),
	} {
		if other == h {
			t.Errorf("a new %s must run the migration again", name)
		}
	}
	plain := unkeyedHash(4, []byte(ep.Spec.Database.Schema), []byte(image(ep, opts)),
		[]byte(ep.Spec.Database.URLSecretRef.Name), []byte(ep.Spec.Database.URLSecretRef.Key), []byte("postgres://a"))
	if h == plain || h == unkeyedHash(8, []byte(ep.Spec.Database.Schema), []byte(image(ep, opts)),
		[]byte(ep.Spec.Database.URLSecretRef.Name), []byte(ep.Spec.Database.URLSecretRef.Key), []byte("postgres://a")) {
		t.Error("MigrationHash is the plain SHA-256 of its inputs: the database URL can be guessed offline")
	}
	if MigrationHash([]byte("another-install-key-0123456789ab"), ep, opts, []byte("postgres://a")) == h {
		t.Error("MigrationHash does not depend on the key")
	}
	ep2 := endpoint()
	ep2.Spec.Receiver.Replicas = ptr.To[int32](5)
	if MigrationHash(testKey, ep2, opts, []byte("postgres://a")) != h {
		t.Error("scaling the receiver must not re-run the migration")
	}
}

func TestServiceAndPDB(t *testing.T) {
	ep := endpoint()
	svc := Service(ep)
	ports := map[string][2]int32{}
	for _, p := range svc.Spec.Ports {
		ports[p.Name] = [2]int32{p.Port, 0}
		if p.TargetPort.StrVal != p.Name {
			t.Errorf("port %s targets %v", p.Name, p.TargetPort)
		}
	}
	if ports[PortNameHTTP][0] != 80 || ports[PortNameMetrics][0] != config.AdminPort {
		t.Errorf("service ports = %v", ports)
	}
	if sa := ServiceAccount(ep); *sa.AutomountServiceAccountToken {
		t.Error("ServiceAccount must not automount a token")
	}
	for _, tc := range []struct {
		replicas *int32
		want     bool
	}{{ptr.To[int32](1), false}, {ptr.To[int32](2), true}, {ptr.To[int32](0), false}, {nil, true}} {
		e := endpoint()
		e.Spec.Receiver.Replicas = tc.replicas
		if got := WantsPDB(e, options(t, e, now)); got != tc.want {
			t.Errorf("replicas %v: WantsPDB = %v", tc.replicas, got)
		}
	}
	pdb := PodDisruptionBudget(ep)
	if pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil {
		t.Errorf("pdb = %+v", pdb.Spec)
	}
}

func TestNetworkPolicy(t *testing.T) {
	for _, tc := range []struct {
		name        string
		np          v1alpha1.NetworkPolicySpec
		wantEgress  int // number of egress rules; 0 = egress not limited
		wantNSMatch bool
	}{
		{name: "defaults: metrics from own namespace", np: v1alpha1.NetworkPolicySpec{Enabled: ptr.To(true)}},
		{name: "metrics from monitoring", np: v1alpha1.NetworkPolicySpec{Enabled: ptr.To(true),
			MetricsFrom: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}}}, wantNSMatch: true},
		{name: "egress limited", np: v1alpha1.NetworkPolicySpec{Enabled: ptr.To(true), Egress: &v1alpha1.EgressSpec{
			DatabaseCIDRs: []string{"10.0.0.0/24"}, SinkCIDRs: []string{"10.1.0.0/16"}, SinkPorts: []int32{8080}}}, wantEgress: 3},
		{name: "egress database only", np: v1alpha1.NetworkPolicySpec{Enabled: ptr.To(true), Egress: &v1alpha1.EgressSpec{
			DatabaseCIDRs: []string{"10.0.0.0/24"}, DatabasePort: 6432}}, wantEgress: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := endpoint()
			ep.Spec.NetworkPolicy = tc.np
			p := NetworkPolicy(ep)
			if len(p.Spec.Ingress) != 2 {
				t.Fatalf("ingress rules = %d", len(p.Spec.Ingress))
			}
			webhook, metricsRule := p.Spec.Ingress[0], p.Spec.Ingress[1]
			if webhook.Ports[0].Port.IntValue() != config.WebhookPort || len(webhook.From) != 0 {
				t.Errorf("webhook rule = %+v (must be open to all sources)", webhook)
			}
			if metricsRule.Ports[0].Port.IntValue() != config.AdminPort || len(metricsRule.From) != 1 {
				t.Fatalf("metrics rule = %+v", metricsRule)
			}
			from := metricsRule.From[0]
			if tc.wantNSMatch != (from.NamespaceSelector != nil) || (!tc.wantNSMatch && from.PodSelector == nil) {
				t.Errorf("metrics peer = %+v", from)
			}
			if len(p.Spec.Egress) != tc.wantEgress {
				t.Errorf("egress rules = %d, want %d", len(p.Spec.Egress), tc.wantEgress)
			}
			hasEgressType := len(p.Spec.PolicyTypes) == 2
			if hasEgressType != (tc.wantEgress > 0) {
				t.Errorf("policy types = %v", p.Spec.PolicyTypes)
			}
			if tc.wantEgress > 0 {
				dns := p.Spec.Egress[0]
				if dns.Ports[0].Port.IntValue() != 53 || *dns.Ports[0].Protocol != corev1.ProtocolUDP {
					t.Errorf("first egress rule must allow DNS: %+v", dns)
				}
				db := p.Spec.Egress[1]
				wantPort := int(tc.np.Egress.DatabasePort)
				if wantPort == 0 {
					wantPort = 5432
				}
				if db.Ports[0].Port.IntValue() != wantPort || db.To[0].IPBlock.CIDR != "10.0.0.0/24" {
					t.Errorf("database rule = %+v", db)
				}
			}
		})
	}
}

func TestExposure(t *testing.T) {
	ep := endpoint()
	if got := InClusterURL(ep); got != "http://orders-receiver.shop.svc/stripe" {
		t.Errorf("InClusterURL = %s", got)
	}
	ep.Spec.Exposure = &v1alpha1.ExposureSpec{HTTPRoute: &v1alpha1.HTTPRouteExposure{
		ParentRefs: []v1alpha1.ParentReference{{Name: "public", Namespace: "gateways", SectionName: "https"}, {Name: "local"}},
		Hostnames:  []string{"hooks.example.com"},
	}}
	if got := PublicURL(ep); got != "https://hooks.example.com/stripe" {
		t.Errorf("PublicURL = %s", got)
	}
	route := HTTPRoute(ep)
	if len(route.Spec.ParentRefs) != 2 || string(route.Spec.ParentRefs[0].Name) != "public" ||
		string(*route.Spec.ParentRefs[0].Namespace) != "gateways" || string(*route.Spec.ParentRefs[0].SectionName) != "https" ||
		route.Spec.ParentRefs[1].Namespace != nil {
		t.Errorf("parentRefs = %+v", route.Spec.ParentRefs)
	}
	if len(route.Spec.Hostnames) != 1 || route.Spec.Hostnames[0] != "hooks.example.com" {
		t.Errorf("hostnames = %v", route.Spec.Hostnames)
	}
	rule := route.Spec.Rules[0]
	if *rule.Matches[0].Path.Value != "/stripe" || len(rule.BackendRefs) != 1 || len(rule.Filters) != 0 {
		t.Errorf("rule = %+v", rule)
	}
	ep.Spec.Exposure.HTTPRoute.Path = "/hooks/stripe"
	rewritten := HTTPRoute(ep).Spec.Rules[0]
	if *rewritten.Matches[0].Path.Value != "/hooks/stripe" || len(rewritten.Filters) != 1 ||
		*rewritten.Filters[0].URLRewrite.Path.ReplacePrefixMatch != "/stripe" {
		t.Errorf("a public prefix other than the receiver path must be rewritten to it: %+v", rewritten)
	}
	if got := PublicURL(ep); got != "https://hooks.example.com/hooks/stripe" {
		t.Errorf("PublicURL = %s", got)
	}
	ep.Spec.Exposure.HTTPRoute.Path = ""
	be := rule.BackendRefs[0]
	if string(be.Name) != "orders-receiver" || *be.Port != 80 || string(*be.Kind) != "Service" {
		t.Errorf("backend = %+v (only the webhook port may be routed)", be)
	}

	ep.Spec.Exposure = &v1alpha1.ExposureSpec{Ingress: &v1alpha1.IngressExposure{
		ClassName: "nginx", Host: "hooks.example.com", Path: "/in", TLSSecretName: "hooks-tls",
		Annotations: map[string]string{"cert-manager.io/cluster-issuer": "letsencrypt"},
	}}
	ing := Ingress(ep)
	if *ing.Spec.IngressClassName != "nginx" || ing.Annotations["cert-manager.io/cluster-issuer"] != "letsencrypt" {
		t.Errorf("ingress meta = %+v", ing)
	}
	if len(ing.Spec.TLS) != 1 || ing.Spec.TLS[0].SecretName != "hooks-tls" || ing.Spec.TLS[0].Hosts[0] != "hooks.example.com" {
		t.Errorf("tls = %+v", ing.Spec.TLS)
	}
	path := ing.Spec.Rules[0].HTTP.Paths[0]
	if path.Path != "/in" || path.Backend.Service.Name != "orders-receiver" || path.Backend.Service.Port.Name != PortNameHTTP {
		t.Errorf("path = %+v", path)
	}
	if got := PublicURL(ep); got != "https://hooks.example.com/in" {
		t.Errorf("PublicURL = %s", got)
	}
	ep.Spec.Exposure.Ingress.TLSSecretName = ""
	ep.Spec.Exposure.Ingress.ClassName = ""
	if ing := Ingress(ep); ing.Spec.TLS != nil || ing.Spec.IngressClassName != nil {
		t.Errorf("optional fields set: %+v", ing.Spec)
	}
}

func metricName(t *testing.T, c prometheus.Collector) string {
	t.Helper()
	ch := make(chan *prometheus.Desc, 1)
	c.Describe(ch)
	desc := (<-ch).String()
	start := strings.Index(desc, `fqName: "`) + len(`fqName: "`)
	return desc[start : start+strings.Index(desc[start:], `"`)]
}

func TestMonitoring(t *testing.T) {
	ep := endpoint()
	sm := ServiceMonitor(ep)
	if sm.GetKind() != "ServiceMonitor" || sm.GetAPIVersion() != "monitoring.coreos.com/v1" {
		t.Errorf("gvk = %s", sm.GroupVersionKind())
	}
	eps := sm.Object["spec"].(map[string]any)["endpoints"].([]any)
	if eps[0].(map[string]any)["port"] != PortNameMetrics {
		t.Errorf("endpoints = %v", eps)
	}
	pr := PrometheusRule(ep)
	raw, err := json.Marshal(pr.Object)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []prometheus.Collector{metrics.OutboxOldestAge, metrics.OutboxDead, metrics.SignatureFailures, metrics.Requests, metrics.Duplicates} {
		if name := metricName(t, c); !strings.Contains(string(raw), name) {
			t.Errorf("PrometheusRule does not use %s", name)
		}
	}
	for _, alert := range []string{"HookkeeperOutboxLagging", "HookkeeperDeadLetters", "HookkeeperParkedEventsExpired", "HookkeeperGuardErrors", "HookkeeperSignatureFailureSpike", "HookkeeperDuplicateRateJump"} {
		if !strings.Contains(string(raw), alert) {
			t.Errorf("missing alert %s", alert)
		}
	}
	if !strings.Contains(string(raw), `service=\"orders-receiver\"`) {
		t.Errorf("rules must select this endpoint's series: %s", raw)
	}
}
