package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/store"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

const (
	testSigningSecret = "whsec_c2lnbmluZy1zZWNyZXQtdmFsdWU="
	testDBPassword    = "in-cluster-db-password"
	// The in-cluster URL: a closed port, as an in-cluster address is from a laptop.
	inClusterDBURL = "postgres://app:" + testDBPassword + "@127.0.0.1:1/app?sslmode=disable"
)

// clusterFixture is a namespace on the package's envtest apiserver holding the Secrets
// and the WebhookEndpoint orders-payments, and a kubeconfig whose context defaults to
// that namespace.
type clusterFixture struct {
	ns         string
	kubeconfig string
	c          client.Client
	cfg        *rest.Config
}

func newClusterFixture(t *testing.T) *clusterFixture {
	t.Helper()
	cfg := testsupport.StartEnvtest(t)
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "replay-"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), ns) })
	f := &clusterFixture{ns: ns.Name, c: c, cfg: cfg}
	f.create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "shop-db-app"}, StringData: map[string]string{"uri": inClusterDBURL}})
	f.create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "stripe-webhook"}, StringData: map[string]string{"secret": testSigningSecret}})
	f.create(t, endpointObject("orders-payments", "secret"))
	f.kubeconfig = f.writeKubeconfig(t, "")
	return f
}

func (f *clusterFixture) create(t *testing.T, obj client.Object) {
	t.Helper()
	obj.SetNamespace(f.ns)
	if err := f.c.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// endpointObject is testsupport.StripeCaptureEndpoint named name, its signing secret
// read from key signingKey of Secret stripe-webhook and its database URL from key uri
// of Secret shop-db-app.
func endpointObject(name, signingKey string) *v1alpha1.WebhookEndpoint {
	we := testsupport.StripeCaptureEndpoint(testsupport.SecretRef("stripe-webhook", signingKey), testsupport.SecretRef("shop-db-app", "uri"))
	we.Name = name
	return we
}

// writeKubeconfig writes a kubeconfig for the envtest apiserver whose context's
// namespace is the fixture's; impersonate, when set, makes its requests that user's.
func (f *clusterFixture) writeKubeconfig(t *testing.T, impersonate string) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: f.cfg.Host, CertificateAuthorityData: f.cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: f.cfg.CertData, ClientKeyData: f.cfg.KeyData, Token: f.cfg.BearerToken,
		Impersonate: impersonate,
	}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin", Namespace: f.ns}
	kc.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatalf("write kubeconfig: %v", err)
	}
	return path
}

// runCLI runs hookkeeper in-process and returns its stdout and stderr. Flags keep
// their values between Execute calls, so the replay command's are reset afterwards.
// cliWith returns a runner of the CLI whose arguments start with base.
func cliWith(t *testing.T, base ...string) func(args ...string) (string, string, error) {
	return func(args ...string) (string, string, error) {
		t.Helper()
		return runCLI(t, append(append([]string{}, base...), args...)...)
	}
}

// refusal is a command line the CLI must refuse, and what its error says.
type refusal struct {
	args []string
	want string
}

// expectRefused runs each named command line and wants it refused with its error.
func expectRefused(t *testing.T, cases map[string]refusal) {
	t.Helper()
	for name, tc := range cases {
		if _, _, err := runCLI(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}

func runCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	rootCmd.SetArgs(args)
	rootCmd.SetOut(&stdout)
	rootCmd.SetErr(&stderr)
	defer func() {
		rootCmd.SetArgs(nil)
		rootCmd.SetOut(nil)
		rootCmd.SetErr(nil)
		if cmd, _, err := rootCmd.Find(args); err == nil {
			resetFlags(cmd)
		}
	}()
	_, err := rootCmd.ExecuteC()
	return stdout.String(), stderr.String(), err
}

func resetFlags(cmd *cobra.Command) {
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			_ = sv.Replace(nil)
		} else {
			_ = f.Value.Set(f.DefValue)
		}
		f.Changed = false
	})
}

// insertDeadLetter adds one dead-lettered outbox row of endpoint, entity order-1, with
// dedupe key and source event id eventID, and returns its id.
func insertDeadLetter(t *testing.T, dbURL, endpoint, eventID string) int64 {
	t.Helper()
	ctx, conn := connect(t, dbURL)
	var id int64
	err := conn.QueryRow(ctx, `INSERT INTO `+store.TablesIn("hookkeeper").Outbox+`
(endpoint, dedupe_key, entity_key, event_type, source_event_id, payload, occurred_at, dead_at, last_error)
VALUES ($1, $2, 'order-1', 'order.paid', $2, '{}', now(), now(), 'sink answered 500')
RETURNING id`, endpoint, eventID).Scan(&id)
	if err != nil {
		t.Fatalf("insert dead letter: %v", err)
	}
	return id
}

// connect opens a connection to dbURL for the test, closed when it ends, and returns it
// with a context that ends after 30 seconds.
func connect(t *testing.T, dbURL string) (context.Context, *pgx.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return ctx, conn
}

func assertNoSecrets(t *testing.T, outputs ...string) {
	t.Helper()
	for _, out := range outputs {
		for _, secret := range []string{testSigningSecret, testDBPassword} {
			if strings.Contains(out, secret) {
				t.Errorf("output shows a secret value: %q", out)
			}
		}
	}
}

// `hookkeeper replay -n NS NAME` reads the endpoint and its Secrets through the
// kubeconfig, as kubectl does, and works on the database --database-url names.
func TestReplayFromCluster(t *testing.T) {
	f := newClusterFixture(t)
	dbURL := testsupport.MigratedDatabase(t, "hookkeeper")
	key := f.ns + "/orders-payments"
	id := insertDeadLetter(t, dbURL, key, "evt-1")
	t.Setenv("KUBECONFIG", f.kubeconfig)

	stdout, stderr, err := runCLI(t, "replay", "-n", f.ns, "orders-payments", "--dead-letters", "--dry-run", "--database-url", dbURL)
	if err != nil {
		t.Fatalf("replay: %v\nstderr: %s", err, stderr)
	}
	if want := "dead letters of " + key + ": 1 selected, 0 re-driven (dry run: nothing changed)"; !strings.Contains(stdout, want) {
		t.Errorf("stdout %q, want %q", stdout, want)
	}
	if !strings.Contains(stdout, "order-1\torder.paid\tevt-1") || !strings.HasPrefix(stdout, itoa(int(id))+"\t") {
		t.Errorf("stdout %q does not list row %d", stdout, id)
	}
	assertNoSecrets(t, stdout, stderr)

	// Without -n, the context's namespace; --kubeconfig over $KUBECONFIG. --receipts
	// compiles the endpoint, so its signing secret came from the Secret.
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	stdout, stderr, err = runCLI(t, "replay", "--kubeconfig", f.kubeconfig, "orders-payments", "--receipts", "--database-url", dbURL)
	if err != nil {
		t.Fatalf("replay --receipts: %v\nstderr: %s", err, stderr)
	}
	if want := "receipts of " + key + ": 0 selected, 0 re-run"; !strings.Contains(stdout, want) {
		t.Errorf("stdout %q, want %q", stdout, want)
	}
	assertNoSecrets(t, stdout, stderr)
}

// Each failure says what is missing or not allowed, and never shows a secret.
func TestReplayFromClusterErrors(t *testing.T) {
	f := newClusterFixture(t)
	f.create(t, endpointObject("wrong-key", "no-such-key"))
	forbidden := f.writeKubeconfig(t, "alice")

	cases := map[string]struct {
		args []string
		want []string
	}{
		"no such endpoint": {
			[]string{"replay", "--kubeconfig", f.kubeconfig, "-n", f.ns, "nope", "--dead-letters"},
			[]string{`no WebhookEndpoint "nope" in namespace "` + f.ns + `"`},
		},
		"missing Secret key": {
			[]string{"replay", "--kubeconfig", f.kubeconfig, "wrong-key", "--dead-letters"},
			[]string{"spec.signingSecrets[0].secretKeyRef", "Secret " + f.ns + `/stripe-webhook key "no-such-key" not found`},
		},
		"NAME and --endpoint": {
			[]string{"replay", "orders-payments", "--endpoint", "orders.yaml", "--dead-letters"},
			[]string{"NAME (orders-payments", "--endpoint orders.yaml", "not both"},
		},
		"forbidden": {
			[]string{"replay", "--kubeconfig", forbidden, "orders-payments", "--dead-letters"},
			[]string{"forbidden", "get webhookendpoints.hookkeeper.dev", `namespace "` + f.ns + `"`},
		},
		"in-cluster database unreachable": {
			[]string{"replay", "--kubeconfig", f.kubeconfig, "orders-payments", "--dead-letters", "--dry-run"},
			[]string{"open database", "port-forward", "--database-url"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			stdout, stderr, err := runCLI(t, tc.args...)
			if err == nil {
				t.Fatalf("hookkeeper %v succeeded: %s", tc.args, stdout)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			t.Log(err)
			assertNoSecrets(t, err.Error(), stdout, stderr)
		})
	}
}
