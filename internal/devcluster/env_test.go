package devcluster

import (
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/resources"
)

func TestExpandVars(t *testing.T) {
	values := map[string]string{"A": "1", "B": "two"}
	for in, want := range map[string]string{
		"plain":         "plain",
		"$(A)":          "1",
		"x$(A)y$(B)z":   "x1ytwoz",
		"$(MISSING)":    "$(MISSING)",
		"$$(A)":         "$(A)",
		"$$":            "$",
		"$(A":           "$(A",
		"cost $5":       "cost $5",
		"trailing $":    "trailing $",
		"$(A)$(A)$$(B)": "11$(B)",
	} {
		if got := expandVars(in, values); got != want {
			t.Errorf("expandVars(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPodField(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "p", Namespace: "ns", UID: "u-1",
			Labels:      map[string]string{"app": "web", "tier": "a"},
			Annotations: map[string]string{"note": "x"},
		},
		Spec: corev1.PodSpec{NodeName: "local", ServiceAccountName: "sa"},
	}
	for path, want := range map[string]string{
		"metadata.name":                "p",
		"metadata.namespace":           "ns",
		"metadata.uid":                 "u-1",
		"spec.nodeName":                "local",
		"spec.serviceAccountName":      "sa",
		"status.podIP":                 "127.0.0.9",
		"status.hostIP":                "127.0.0.1",
		"metadata.labels['app']":       "web",
		"metadata.annotations['note']": "x",
		"metadata.labels":              "app=\"web\"\ntier=\"a\"",
	} {
		got, err := podField(pod, path, "127.0.0.9", "127.0.0.1")
		if err != nil || got != want {
			t.Errorf("podField(%q) = %q, %v; want %q", path, got, err, want)
		}
	}
	if _, err := podField(pod, "spec.unknown", "", ""); err == nil {
		t.Error("podField accepted an unsupported path")
	}
}

func TestIPPool(t *testing.T) {
	p := newIPPool(0)
	a, err := p.reserve(netipAddr(""))
	if err != nil || a.String() != "127.0.0.2" {
		t.Fatalf("first reserve = %v, %v", a, err)
	}
	b, _ := p.reserve(netipAddr("127.0.0.2"))
	if b == a {
		t.Fatalf("reserved %s twice", a)
	}
	if err := p.release(a); err != nil {
		t.Fatal(err)
	}
	if err := p.release(a); err == nil {
		t.Fatal("double release accepted")
	}
	seen := map[string]bool{b.String(): true}
	for range 252 {
		x, err := p.reserve(netipAddr(""))
		if err != nil {
			t.Fatalf("reserve: %v", err)
		}
		if seen[x.String()] {
			t.Fatalf("%s handed out twice", x)
		}
		seen[x.String()] = true
	}
	if _, err := p.reserve(netipAddr("")); err == nil {
		t.Fatal("pool handed out more than 253 addresses")
	}
}

func netipAddr(s string) netip.Addr {
	a, _ := netip.ParseAddr(s)
	return a
}

// Two local clusters on one machine never share a loopback subnet: a claimed subnet is
// skipped until it is released, then claimed again.
func TestClaimSubnet(t *testing.T) {
	a, releaseA, err := claimSubnet()
	if err != nil {
		t.Fatal(err)
	}
	b, releaseB, err := claimSubnet()
	if err != nil {
		t.Fatal(err)
	}
	defer releaseB()
	if a == b {
		t.Fatalf("claimed 127.0.%d.0/24 twice", a)
	}
	releaseA()
	c, releaseC, err := claimSubnet()
	if err != nil {
		t.Fatal(err)
	}
	defer releaseC()
	if c != a {
		t.Fatalf("after releasing 127.0.%d.0/24 the next claim took 127.0.%d.0/24", a, c)
	}
	p := newIPPool(b)
	ip, err := p.reserve(netipAddr(""))
	if err != nil || ip.As4()[2] != b {
		t.Fatalf("reserve in 127.0.%d.0/24 = %v, %v", b, ip, err)
	}
}

// A listener on 127.0.X.N (N >= 2) marks subnet X as taken.
func TestListeningSubnets(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.77:0")
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.77: %v", err)
	}
	defer func() { _ = l.Close() }()
	busy, err := listeningSubnets()
	if err != nil {
		t.Fatal(err)
	}
	if !busy[0] {
		t.Fatalf("a listener on %s does not mark 127.0.0.0/24 taken: %v", l.Addr(), busy)
	}
}

func TestResourceField(t *testing.T) {
	// The receiver pods the operator builds: GOMAXPROCS comes from the CPU request.
	pool := &v1alpha1.WebhookReceiverPool{ObjectMeta: metav1.ObjectMeta{Name: "shared", Namespace: "hooks"}}
	receiverPod := func(requests corev1.ResourceList) *corev1.Pod {
		spec := resources.PoolReceivers(pool, resources.Options{Image: "hookkeeper:test"}).Deployment().Spec.Template.Spec
		if requests != nil {
			spec.Containers[0].Resources.Requests = requests
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "hooks"}, Spec: spec}
	}
	goMaxProcs := func(pod *corev1.Pod) *corev1.ResourceFieldSelector {
		for _, e := range pod.Spec.Containers[0].Env {
			if e.Name == "GOMAXPROCS" {
				return e.ValueFrom.ResourceFieldRef
			}
		}
		t.Fatal("the receiver container has no GOMAXPROCS")
		return nil
	}
	withCPU := func(cpu string) *corev1.Pod {
		return receiverPod(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)})
	}
	other := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("48Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
	}}}}}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		ref  *corev1.ResourceFieldSelector
		want string
	}{
		{name: "the receiver's default request of 100m", pod: receiverPod(nil), want: "1"},
		{name: "a request of exactly one CPU", pod: withCPU("1"), want: "1"},
		{name: "a request of 2500m rounds up", pod: withCPU("2500m"), want: "3"},
		{name: "no CPU request", pod: receiverPod(corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("48Mi")}), want: "0"},
		{name: "memory request in MiB", pod: other, ref: &corev1.ResourceFieldSelector{Resource: "requests.memory", Divisor: resource.MustParse("1Mi")}, want: "48"},
		{name: "memory limit in bytes", pod: other, ref: &corev1.ResourceFieldSelector{Resource: "limits.memory"}, want: "134217728"},
		{name: "an unset CPU limit is the machine's", pod: other, ref: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}, want: strconv.Itoa(runtime.NumCPU())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref := tc.ref
			if ref == nil {
				ref = goMaxProcs(tc.pod)
			}
			got, err := ResourceField(&tc.pod.Spec, &tc.pod.Spec.Containers[0], ref)
			if err != nil || got != tc.want {
				t.Errorf("resourceField(%+v) = %q, %v; want %q", ref, got, err, tc.want)
			}
		})
	}
	for _, ref := range []*corev1.ResourceFieldSelector{
		{Resource: "requests.cpu", ContainerName: "missing"},
		{Resource: "cpu"},
		{Resource: "status.cpu"},
	} {
		if got, err := ResourceField(&other.Spec, &other.Spec.Containers[0], ref); err == nil {
			t.Errorf("resourceField(%+v) = %q, want an error", ref, got)
		}
	}
}
