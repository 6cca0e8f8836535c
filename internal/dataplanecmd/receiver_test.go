package dataplanecmd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/dataplanecmd"
	"github.com/hookkeeper/hookkeeper/internal/demo"
	"github.com/hookkeeper/hookkeeper/internal/outbox"
	"github.com/hookkeeper/hookkeeper/internal/receipt"
	"github.com/hookkeeper/hookkeeper/internal/store"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

func TestMain(m *testing.M) { testsupport.Main(m) }

// receiverCommand is `hookkeeper receiver args...`, to run in this process until the
// context it is given ends.
func receiverCommand(args ...string) func(ctx context.Context) error {
	cmd := dataplanecmd.Receiver()
	cmd.SetArgs(args)
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	return cmd.ExecuteContext
}

// startReceiver runs `hookkeeper receiver args...` in this process until ctx ends, on
// free webhook and admin addresses (their flags are added here), waits for /readyz and
// returns the webhook address (host:port); what names it in failures.
func startReceiver(t *testing.T, ctx context.Context, what string, args ...string) (webhookAddr string, r *testsupport.Running) {
	t.Helper()
	webhookAddr, adminAddr := testsupport.FreeAddr(t), testsupport.FreeAddr(t)
	r = testsupport.Run(t, ctx, what, 20*time.Second, receiverCommand(
		append([]string{"--listen-address", webhookAddr, "--admin-address", adminAddr}, args...)...))
	testsupport.WaitReady(t, "http://"+adminAddr+"/readyz", 20*time.Second, r.Exited)
	return webhookAddr, r
}

// TestReceiverCommandRecordsAndDispatches runs `hookkeeper receiver` as the operator
// would (manifest plus environment), sends one signed webhook and waits for the
// in-process dispatcher to deliver its effect to a sink, then stops it as SIGTERM would.
func TestReceiverCommandRecordsAndDispatches(t *testing.T) {
	dbURL := testsupport.MigratedDatabase(t, testsupport.StripeEndpointSchema)
	delivered := make(chan *http.Request, 4)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		delivered <- r
		w.WriteHeader(http.StatusNoContent)
	}))
	defer sink.Close()

	const secret = "whsec_command_test"
	t.Setenv(config.EnvDatabaseURL, dbURL)
	t.Setenv(config.EnvSigningSecretPrefix+"0", secret)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	webhookAddr, receiver := startReceiver(t, ctx, "receiver", "--endpoint", testsupport.StripeEndpointFile(t, sink.URL),
		"--dispatcher", "--log-level", "error", "--shutdown-timeout", "10s")

	body := demo.StripeEvent("evt_cmd_1", "payment_intent.succeeded", "ord-9", 4200, time.Now())
	status, err := demo.PostStripe(ctx, "http://"+webhookAddr+"/stripe", secret, body)
	if err != nil || status != http.StatusOK {
		t.Fatalf("webhook: %d (%v), want 200", status, err)
	}

	select {
	case r := <-delivered:
		wantKey := receipt.DedupeKey("shop/payments", "evt_cmd_1", "order.paid")
		if got := r.Header.Get(outbox.HeaderIdempotencyKey); got != wantKey {
			t.Errorf("Idempotency-Key %q, want %q", got, wantKey)
		}
		var env outbox.Envelope
		if err := json.NewDecoder(r.Body).Decode(&env); err != nil {
			t.Fatalf("decode delivery: %v", err)
		}
		if env.Type != "order.paid" || env.EntityKey != "ord-9" || env.SourceEventID != "evt_cmd_1" {
			t.Errorf("delivery %+v, want order.paid for ord-9 from evt_cmd_1", env)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the dispatcher delivered nothing to the sink")
	}

	if err := receiver.Stop(t); err != nil {
		t.Fatalf("receiver stopped with %v", err)
	}
	if c, err := net.DialTimeout("tcp", webhookAddr, time.Second); err == nil {
		_ = c.Close()
		t.Error("the webhook port still accepts connections after shutdown")
	}
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	rows := testsupport.NewRows(conn, store.TablesIn(testsupport.StripeEndpointSchema))
	if pending := rows.Count(t, rows.Tables.Outbox, "delivered_at IS NULL"); pending != 0 {
		t.Errorf("undelivered outbox rows: %d, want 0", pending)
	}
}

func TestReceiverCommandRejectsBadSetup(t *testing.T) {
	t.Setenv(config.EnvEndpoint, "")
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no endpoint":        {nil, config.EnvEndpoint},
		"bad log level":      {[]string{"--log-level", "chatty"}, "--log-level"},
		"negative group":     {[]string{"--group-commit-max-events=-1"}, "--group-commit-max-events"},
		"negative overflow":  {[]string{"--group-commit-overflow-after=-1ms"}, "--group-commit-overflow-after"},
		"negative in flight": {[]string{"--max-in-flight=-1"}, "--max-in-flight"},
		"unwritable profile": {[]string{"--cpu-profile", "/nonexistent-dir/cpu.pprof"}, "--cpu-profile"},
		"unwritable trace":   {[]string{"--execution-trace", "/nonexistent-dir/run.trace"}, "--execution-trace"},
	} {
		err := receiverCommand(tc.args...)(context.Background())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one mentioning %s", name, err, tc.want)
		}
	}
}

// TestReceiverCommandWritesDiagnostics runs the receiver with --cpu-profile and
// --execution-trace through one webhook and a shutdown: both files are complete (a
// gzipped profile, a trace with Go's header) once the command returns, and the webhook
// is answered as without them.
func TestReceiverCommandWritesDiagnostics(t *testing.T) {
	dbURL := testsupport.MigratedDatabase(t, testsupport.StripeEndpointSchema)
	const secret = "whsec_diagnostics_test"
	t.Setenv(config.EnvDatabaseURL, dbURL)
	t.Setenv(config.EnvSigningSecretPrefix+"0", secret)
	dir := t.TempDir()
	profile, execTrace := filepath.Join(dir, "cpu.pprof"), filepath.Join(dir, "run.trace")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	webhookAddr, receiver := startReceiver(t, ctx, "receiver", "--endpoint", testsupport.StripeEndpointFile(t, "http://127.0.0.1:9/"),
		"--dispatcher=false", "--log-level", "error", "--cpu-profile", profile, "--execution-trace", execTrace)

	body := demo.StripeEvent("evt_diag_1", "payment_intent.succeeded", "ord-diag", 4200, time.Now())
	if status, err := demo.PostStripe(ctx, "http://"+webhookAddr+"/stripe", secret, body); err != nil || status != http.StatusOK {
		t.Fatalf("webhook: %d (%v), want 200", status, err)
	}
	if err := receiver.Stop(t); err != nil {
		t.Fatalf("receiver stopped with %v", err)
	}

	p, err := os.ReadFile(profile)
	if err != nil {
		t.Fatal(err)
	}
	if len(p) < 64 || p[0] != 0x1f || p[1] != 0x8b {
		t.Errorf("--cpu-profile wrote %d bytes that are not a gzipped profile", len(p))
	}
	tr, err := os.ReadFile(execTrace)
	if err != nil {
		t.Fatal(err)
	}
	if header, _, _ := bytes.Cut(tr, []byte{0}); !bytes.HasPrefix(header, []byte("go 1.")) || !bytes.HasSuffix(header, []byte(" trace")) || len(tr) < 1024 {
		t.Errorf("--execution-trace wrote %d bytes without a Go trace header (%q)", len(tr), header)
	}
}
