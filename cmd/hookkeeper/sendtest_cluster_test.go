package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/dataplanecmd"
	"github.com/hookkeeper/hookkeeper/internal/demo"
	"github.com/hookkeeper/hookkeeper/internal/devcluster"
	"github.com/hookkeeper/hookkeeper/internal/loopback"
	"github.com/hookkeeper/hookkeeper/internal/receipt"
	"github.com/hookkeeper/hookkeeper/internal/store"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// sendTestFixture is the Stripe orders sample, as `hookkeeper dev` applies it, on the
// package's envtest apiserver, with its database seeded and its receiver (with its
// dispatcher) serving in this process, delivering to a demo sink.
type sendTestFixture struct {
	*clusterFixture
	dbURL, url string
	sink       *demo.Sink
	secret     string
}

const sampleEndpoint = "orders-payments"

func newSendTestFixture(t *testing.T) *sendTestFixture {
	t.Helper()
	f := newClusterFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	dbURL := testsupport.NewDatabase(t)
	if err := demo.SeedOrders(ctx, dbURL); err != nil {
		t.Fatal(err)
	}
	sink, err := demo.StartSink(ctx, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sink.Stop(context.Background()) })

	// The samples, rewired as the dev session rewires them, in a namespace of their own
	// (the fixture's holds another orders-payments).
	root, err := devcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{}
	ns.GenerateName = "send-test-"
	if err := f.c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.c.Delete(context.Background(), ns) })
	f.ns = ns.Name
	f.kubeconfig = f.writeKubeconfig(t, "")
	scheme := runtime.NewScheme()
	_ = corev1.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	for _, rel := range demo.SampleFiles {
		docs, err := demo.ReadManifests(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range docs {
			typed, err := scheme.New(u.GroupVersionKind())
			if err != nil {
				t.Fatal(err)
			}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, typed); err != nil {
				t.Fatal(err)
			}
			obj := typed.(client.Object)
			demo.Rewire(obj, dbURL, sink.URL()+"/events")
			f.create(t, obj)
		}
	}

	// The receiver, from the endpoint and Secrets as the cluster has them.
	we, getenv, err := fromCluster(ctx, kubeFlags{kubeconfig: f.kubeconfig, namespace: f.ns}, sampleEndpoint, nil)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := config.Compile(we, getenv)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Migrate(ctx, dbURL, ep.Spec.Database.Schema); err != nil {
		t.Fatal(err)
	}
	webhookAddr, err := loopback.FreeAddr(ctx)
	if err != nil {
		t.Fatal(err)
	}
	adminAddr, err := loopback.FreeAddr(ctx)
	if err != nil {
		t.Fatal(err)
	}
	receiver := testsupport.Run(t, ctx, "receiver", 30*time.Second, func(ctx context.Context) error {
		return dataplanecmd.Serve(ctx, dataplanecmd.ServeOptions{
			Endpoint: ep, Getenv: getenv, Dispatcher: true, GroupCommit: receipt.DefaultGroupCommit,
			WebhookAddr: webhookAddr, AdminAddr: adminAddr, ShutdownTimeout: 5 * time.Second, Log: logr.Discard(),
		})
	})
	t.Cleanup(func() {
		if err := receiver.Stop(t); err != nil {
			t.Logf("receiver: %v", err)
		}
	})
	testsupport.WaitReady(t, "http://"+adminAddr+"/readyz", 30*time.Second, receiver.Exited)
	return &sendTestFixture{
		clusterFixture: f, dbURL: dbURL, sink: sink,
		url:    "http://" + webhookAddr + ep.Spec.Receiver.Path,
		secret: getenv(config.EnvSigningSecretPrefix + "0"),
	}
}

// assertNoSecret fails when any output shows one of the secrets.
func assertNoSecret(t *testing.T, secrets []string, outputs ...string) {
	t.Helper()
	for _, out := range outputs {
		for _, s := range secrets {
			if s != "" && strings.Contains(out, s) {
				t.Errorf("output shows a secret value: %q", out)
			}
		}
	}
}

// `hookkeeper send-test NAME` signs the Stripe sample with the endpoint's secret from
// the cluster, and reports the answer, the receipt, the test order's state and the
// delivery of order.test to the sink.
func TestSendTestFromCluster(t *testing.T) {
	f := newSendTestFixture(t)
	stdout, stderr, err := runCLI(t, "send-test", "--kubeconfig", f.kubeconfig, "-n", f.ns, sampleEndpoint, "--url", f.url)
	t.Logf("stdout:\n%s", stdout)
	if err != nil {
		t.Fatalf("send-test: %v\nstderr: %s", err, stderr)
	}
	for _, want := range []string{
		"endpoint:  " + f.ns + "/" + sampleEndpoint + " (Stripe, signed with spec.signingSecrets[0])",
		"type hookkeeper.test, entity hookkeeper-test",
		"POST       " + f.url,
		`answer:    200 {"received":true,"duplicate":false}`,
		"receipt:   applied",
		"entity:    hookkeeper-test is payment_pending",
		"outbox:    order.test (row ",
		"after 1 attempt(s)",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout does not say %q", want)
		}
	}
	deliveries := f.sink.Deliveries()
	if len(deliveries) != 1 || deliveries[0].EventType != "order.test" || !strings.Contains(string(deliveries[0].Body), demo.TestOrder) {
		t.Errorf("the sink received %+v, want one delivery for %s", deliveries, demo.TestOrder)
	}
	// The real orders did not move.
	ctx, conn := connect(t, f.dbURL)
	var moved int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM public.orders WHERE status <> 'payment_pending'`).Scan(&moved); err != nil {
		t.Fatal(err)
	}
	if moved != 0 {
		t.Errorf("%d orders moved", moved)
	}
	assertNoSecret(t, []string{f.secret, f.dbURL}, stdout, stderr)

	// Again: a fresh event id, and the test transition applies again.
	stdout, _, err = runCLI(t, "send-test", "--kubeconfig", f.kubeconfig, "-n", f.ns, sampleEndpoint, "--url", f.url)
	if err != nil || !strings.Contains(stdout, "receipt:   applied") {
		t.Fatalf("a second send-test: %v\n%s", err, stdout)
	}
}

// With a secret in the cluster that the receiver does not verify with (the Secret
// changed and the receiver was not rolled), send-test reports the 401 as such and exits
// non-zero; neither secret appears in any output.
func TestSendTestWrongSecret(t *testing.T) {
	f := newSendTestFixture(t)
	ctx := context.Background()
	var s corev1.Secret
	if err := f.c.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: "stripe-webhook"}, &s); err != nil {
		t.Fatal(err)
	}
	const rotated = "whsec_not_what_the_receiver_verifies_with"
	s.Data = map[string][]byte{"current": []byte(rotated)}
	if err := f.c.Update(ctx, &s); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := runCLI(t, "send-test", "--kubeconfig", f.kubeconfig, "-n", f.ns, sampleEndpoint, "--url", f.url)
	t.Logf("stdout:\n%s\nerror: %v", stdout, err)
	if err == nil {
		t.Fatal("send-test succeeded with a secret the receiver does not have")
	}
	if !strings.Contains(stdout, "answer:    401") || !strings.Contains(err.Error(), "refused the signature") {
		t.Errorf("the 401 is not reported as a refused signature: %v\n%s", err, stdout)
	}
	assertNoSecret(t, []string{rotated, f.secret, f.dbURL}, stdout, stderr, err.Error())
	if n := len(f.sink.Deliveries()); n != 0 {
		t.Errorf("the sink received %d deliveries", n)
	}
}
