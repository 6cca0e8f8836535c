package devcluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/demo"
	"github.com/hookkeeper/hookkeeper/internal/resources"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

func TestEndpointAnnouncer(t *testing.T) {
	urls := map[string]string{"shop/orders": "http://127.0.0.1:40001/webhooks/stripe"}
	a := newEndpointAnnouncer(func(ep *v1alpha1.WebhookEndpoint) (string, error) {
		if u, ok := urls[ep.Namespace+"/"+ep.Name]; ok {
			return u, nil
		}
		return "", errors.New("no local listener")
	})
	ep := func(ns, name string, ready metav1.ConditionStatus) *v1alpha1.WebhookEndpoint {
		e := &v1alpha1.WebhookEndpoint{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if ready != "" {
			e.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: ready}}
		}
		return e
	}
	step := func(what, got, want string) {
		t.Helper()
		if got != want {
			t.Errorf("%s: printed %q, want %q", what, got, want)
		}
	}

	// The samples' addresses are printed at start; the watch's initial list is quiet.
	a.seen("shop", "sample", "http://127.0.0.1:40000/")
	urls["shop/sample"] = "http://127.0.0.1:40000/"
	step("initial list, sample", a.updated(ep("shop", "sample", metav1.ConditionTrue)), "")

	step("created", a.updated(ep("shop", "orders", "")), "")
	step("not ready yet", a.updated(ep("shop", "orders", metav1.ConditionFalse)), "")
	step("ready", a.updated(ep("shop", "orders", metav1.ConditionTrue)),
		"receiver:   shop/orders -> POST http://127.0.0.1:40001/webhooks/stripe")
	step("still ready", a.updated(ep("shop", "orders", metav1.ConditionTrue)), "")
	step("a rollout", a.updated(ep("shop", "orders", metav1.ConditionFalse)), "")
	step("ready again, same address", a.updated(ep("shop", "orders", metav1.ConditionTrue)), "")

	deleting := ep("shop", "orders", metav1.ConditionTrue)
	deleting.DeletionTimestamp = &metav1.Time{}
	step("being deleted", a.updated(deleting), "")
	step("deleted", a.deleted("shop", "orders"), "receiver:   shop/orders deleted")

	// Recreated under the same name, with a new Service and so a new address.
	urls["shop/orders"] = "http://127.0.0.1:40002/webhooks/stripe"
	step("recreated", a.updated(ep("shop", "orders", metav1.ConditionTrue)),
		"receiver:   shop/orders -> POST http://127.0.0.1:40002/webhooks/stripe")

	step("ready without a listener", a.updated(ep("other", "lost", metav1.ConditionTrue)),
		"receiver:   other/lost is Ready but has no local address: no local listener")
}

// TestWatchEndpoints runs the watch against a real API server: an endpoint applied after
// start prints its proxied address once Ready, and its deletion.
func TestWatchEndpoints(t *testing.T) {
	binDir := os.Getenv(EnvBinDir)
	if binDir == "" {
		binDir = filepath.Join("..", "..", "bin")
	}
	if _, err := resolveBinaries(binDir); err != nil {
		t.Fatalf("this test needs the control-plane binaries: %v", err)
	}
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cluster, err := StartCluster(ctx, ClusterOptions{
		BinDir: binDir, CRDDirs: []string{filepath.Join(root, "config", "crd", "bases")}, Out: testWriter{t},
	})
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	defer func() {
		if err := cluster.Stop(); err != nil {
			t.Errorf("stop cluster: %v", err)
		}
	}()
	proxy, err := NewServiceProxy(ServiceProxyOptions{Config: cluster.Config()})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(2)
	go func() { defer wg.Done(); _ = proxy.Run(ctx) }()
	<-proxy.Ready()

	out := &testsupport.SyncBuffer{}
	printed := out.String
	s := &Session{Cluster: cluster, Proxy: proxy}
	go func() {
		defer wg.Done()
		if err := s.WatchEndpoints(ctx, out, nil); err != nil && ctx.Err() == nil {
			t.Errorf("watch: %v", err)
		}
	}()

	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cluster.Config(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	docs, err := demo.ReadManifests(filepath.Join(root, "config/samples/hookkeeper_v1alpha1_webhookendpoint_stripe_orders.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ep *v1alpha1.WebhookEndpoint
	for _, u := range docs {
		obj, err := adaptSample(scheme, u, SampleOptions{SinkURL: "http://127.0.0.1:1/events"})
		if err != nil {
			t.Fatal(err)
		}
		if e, ok := obj.(*v1alpha1.WebhookEndpoint); ok {
			ep = e
		}
	}
	if ep == nil {
		t.Fatal("no WebhookEndpoint in the sample")
	}
	ep.Namespace = "default"
	if err := c.Create(ctx, ep); err != nil {
		t.Fatalf("create endpoint: %v", err)
	}
	// What the operator does, by hand: the receiver Service, then Ready.
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ep.Namespace, Name: resources.ReceiverName(ep)},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "none"},
			Ports:    []corev1.ServicePort{{Name: resources.PortNameHTTP, Port: 8080}},
		},
	}
	if err := c.Create(ctx, svc); err != nil {
		t.Fatalf("create service: %v", err)
	}
	time.Sleep(500 * time.Millisecond)
	if got := printed(); got != "" {
		t.Errorf("printed before Ready: %q", got)
	}
	meta.SetStatusCondition(&ep.Status.Conditions, metav1.Condition{
		Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready", Message: "test",
	})
	if err := c.Status().Update(ctx, ep); err != nil {
		t.Fatalf("set Ready: %v", err)
	}
	wantURL := func() string {
		u, err := ReceiverURL(proxy, ep)
		if err != nil {
			return err.Error()
		}
		return u
	}
	waitFor := func(want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(printed(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("printed %q, want a line %q", printed(), want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitFor(ReceiverLine(ep.Namespace, ep.Name, wantURL()) + "\n")
	if err := c.Delete(ctx, ep); err != nil {
		t.Fatalf("delete endpoint: %v", err)
	}
	waitFor("receiver:   default/" + ep.Name + " deleted\n")
	t.Logf("printed:\n%s", printed())
}
