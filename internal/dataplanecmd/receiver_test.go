package dataplanecmd

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/outbox"
	"github.com/hookkeeper/hookkeeper/internal/receipt"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

func TestMain(m *testing.M) { testsupport.Main(m) }

const receiverTestManifest = `apiVersion: hookkeeper.dev/v1alpha1
kind: WebhookEndpoint
metadata: {name: payments, namespace: shop}
spec:
  provider: {type: Stripe}
  signingSecrets:
  - secretKeyRef: {name: stripe-webhook, key: current}
  event:
    entityKey: body.data.object.metadata.order
  database:
    urlSecretRef: {name: db, key: uri}
    schema: hookkeeper
  entity: {onUnmatched: Create}
  stateMachine:
    initial: payment_pending
    states: [payment_pending, paid]
    transitions:
    - {name: capture, on: [payment_intent.succeeded], from: [payment_pending], to: paid, emit: order.paid}
  delivery:
    sink: {url: %q}
    backoff: {initial: 100ms, max: 1s}
  receiver: {path: /stripe}
`

// TestReceiverCommandRecordsAndDispatches runs `hookkeeper receiver` as the operator
// would (manifest plus environment), sends one signed webhook and waits for the
// in-process dispatcher to deliver its effect to a sink, then stops it as SIGTERM would.
func TestReceiverCommandRecordsAndDispatches(t *testing.T) {
	dbURL := testsupport.MigratedDatabase(t, "hookkeeper")
	delivered := make(chan *http.Request, 4)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		delivered <- r
		w.WriteHeader(http.StatusNoContent)
	}))
	defer sink.Close()

	manifest := filepath.Join(t.TempDir(), "endpoint.yaml")
	if err := os.WriteFile(manifest, fmt.Appendf(nil, receiverTestManifest, sink.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	const secret = "whsec_command_test"
	t.Setenv(config.EnvDatabaseURL, dbURL)
	t.Setenv(config.EnvSigningSecretPrefix+"0", secret)
	webhookAddr, adminAddr := testsupport.FreeAddr(t), testsupport.FreeAddr(t)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- runReceiver(ctx, receiverFlags{
			endpointFile: manifest, listenAddress: webhookAddr, adminAddress: adminAddr,
			dispatcher: true, logLevel: "error", shutdownTimeout: 10 * time.Second,
		})
	}()
	testsupport.Eventually(t, 20*time.Second, 25*time.Millisecond, "the receiver to be ready", func() bool {
		select {
		case err := <-done:
			t.Fatalf("receiver exited: %v", err)
		default:
		}
		resp, err := http.Get("http://" + adminAddr + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	body := fmt.Appendf(nil, `{"id":"evt_cmd_1","type":"payment_intent.succeeded","created":%d,"data":{"object":{"metadata":{"order":"ord-9"}}}}`, time.Now().Unix())
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	req, err := http.NewRequest(http.MethodPost, "http://"+webhookAddr+"/stripe", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Stripe-Signature", "t="+ts+",v1="+hex.EncodeToString(mac.Sum(nil)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("webhook: %d, want 200", resp.StatusCode)
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

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("receiver stopped with %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("receiver did not stop")
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
	var pending int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM hookkeeper.outbox WHERE delivered_at IS NULL`).Scan(&pending); err != nil || pending != 0 {
		t.Errorf("undelivered outbox rows: %d (%v), want 0", pending, err)
	}
}

func TestReceiverCommandRejectsBadSetup(t *testing.T) {
	t.Setenv(config.EnvEndpoint, "")
	for name, tc := range map[string]struct {
		flags receiverFlags
		want  string
	}{
		"no endpoint":        {receiverFlags{logLevel: "info"}, config.EnvEndpoint},
		"bad log level":      {receiverFlags{logLevel: "chatty"}, "--log-level"},
		"negative group":     {receiverFlags{logLevel: "info", groupMaxEvents: -1}, "--group-commit-max-events"},
		"negative in flight": {receiverFlags{logLevel: "info", maxInFlight: -1}, "--max-in-flight"},
	} {
		err := runReceiver(context.Background(), tc.flags)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one mentioning %s", name, err, tc.want)
		}
	}
}
