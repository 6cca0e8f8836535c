package dataplanecmd

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// receiverProcessEnv carries the arguments of `hookkeeper receiver` (a JSON list) to
// TestReceiverProcess in a re-executed test binary.
const receiverProcessEnv = "HOOKKEEPER_TEST_RECEIVER_ARGS"

// TestReceiverProcess runs `hookkeeper receiver` as a process of its own, for tests that
// measure or signal the process; it runs only when re-executed with receiverProcessEnv.
func TestReceiverProcess(t *testing.T) {
	raw := os.Getenv(receiverProcessEnv)
	if raw == "" {
		t.Skip("runs only as the child process of a receiver process test")
	}
	var args []string
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		t.Fatal(err)
	}
	cmd := Receiver()
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
}

// StartReceiverProcess runs `hookkeeper receiver` with args as a process of its own:
// this test binary, re-executed into TestReceiverProcess, with env ("NAME=value")
// added to its environment. It serves its admin endpoints on adminAddr (the flag is
// added here), and StartReceiverProcess returns once /readyz answers there, failing t
// when it has not within ready. The process stops at Stop or when t ends; what names
// it in failures. Exported for the dataplanecmd_test tests that measure a pool.
func StartReceiverProcess(t testing.TB, what, adminAddr string, args, env []string, ready time.Duration) *testsupport.Process {
	t.Helper()
	raw, err := json.Marshal(append([]string{"--admin-address", adminAddr}, args...))
	if err != nil {
		t.Fatalf("encode the receiver's arguments: %v", err)
	}
	child := exec.Command(os.Args[0], "-test.run=^TestReceiverProcess$")
	child.Env = append(append(os.Environ(), receiverProcessEnv+"="+string(raw)), env...)
	p := testsupport.StartProcess(t, what, child, 60*time.Second)
	testsupport.WaitReady(t, "http://"+adminAddr+"/readyz", ready, p.Exited)
	return p
}

// Slow clients that announce a body of maxBodyBytes and send (almost) nothing of it
// must not make the receiver's memory grow with what they announce: at most
// maxInFlight (64) are admitted, the rest get 503 with Retry-After at once, and the
// admitted ones cost what they sent, not 1 MiB each.
func TestSlowClientsAnnouncingMaxBodyBytesKeepReceiverMemoryBounded(t *testing.T) {
	const (
		clients = 300
		// rssBound is how much the receiver's resident memory may grow. Before the fix,
		// each connection grew a 1 MiB buffer as soon as its headers arrived.
		rssBound = 40 << 20
	)
	dbURL := testsupport.MigratedDatabase(t, testsupport.StripeEndpointSchema)
	manifest := testsupport.StripeEndpointFile(t, testsupport.AcceptingSink(t))
	webhookAddr, adminAddr := testsupport.FreeAddr(t), testsupport.FreeAddr(t)
	receiver := StartReceiverProcess(t, "receiver", adminAddr,
		[]string{"--endpoint", manifest, "--listen-address", webhookAddr, "--log-level", "error", "--dispatcher=false"},
		[]string{config.EnvDatabaseURL + "=" + dbURL, config.EnvSigningSecretPrefix + "0=whsec_memory_test"}, 20*time.Second)
	defer receiver.Stop()
	pid := receiver.Pid()
	baseline := testsupport.RSS(t, pid)

	// Each client sends its headers and the first byte of a 1 MiB body, then stalls.
	var refused, answered atomic.Int64
	var conns sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); conns.Wait() }()
	head := "POST /stripe HTTP/1.1\r\nHost: " + webhookAddr + "\r\nContent-Type: application/json\r\n" +
		"Stripe-Signature: t=1,v1=00\r\nContent-Length: " + strconv.Itoa(1<<20) + "\r\n\r\n{"
	for range clients {
		c, err := net.Dial("tcp", webhookAddr)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		if _, err := io.WriteString(c, head); err != nil {
			t.Fatalf("write: %v", err)
		}
		conns.Go(func() {
			stop := context.AfterFunc(ctx, func() { _ = c.Close() })
			defer stop()
			defer func() { _ = c.Close() }()
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return
			}
			_ = resp.Body.Close()
			answered.Add(1)
			if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "" {
				refused.Add(1)
			}
		})
	}

	// Wait until every client is either refused or admitted (in flight), watching the
	// receiver's memory all along.
	inFlight := regexp.MustCompile(`(?m)^hookkeeper_webhook_in_flight_requests\{endpoint="shop/payments"\} (\d+)`)
	peak := baseline
	admitted := 0
	deadline := time.Now().Add(20 * time.Second)
	for {
		rss := testsupport.RSS(t, pid)
		peak = max(peak, rss)
		if growth := peak - baseline; growth > rssBound {
			t.Fatalf("receiver RSS grew by %d MiB (from %d to %d MiB) with %d slow clients, want at most %d MiB",
				growth>>20, baseline>>20, peak>>20, clients, rssBound>>20)
		}
		if m := inFlight.FindStringSubmatch(scrape(adminAddr)); m != nil {
			admitted, _ = strconv.Atoi(m[1])
		}
		if int(refused.Load())+admitted >= clients {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s: %d clients refused with 503 and Retry-After, %d in flight, %d answered, of %d",
				refused.Load(), admitted, answered.Load(), clients)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A last look once all are accounted for.
	peak = max(peak, testsupport.RSS(t, pid))
	t.Logf("receiver RSS %d MiB before, peak %d MiB with %d slow clients (%d in flight, %d refused)",
		baseline>>20, peak>>20, clients, admitted, refused.Load())
	if growth := peak - baseline; growth > rssBound {
		t.Errorf("receiver RSS grew by %d MiB, want at most %d MiB", growth>>20, rssBound>>20)
	}
	if admitted > 64 {
		t.Errorf("%d requests in flight, want at most maxInFlight (64)", admitted)
	}
}

// scrape returns the /metrics text of the admin port at adminAddr, or "" while it does
// not answer (the caller polls).
func scrape(adminAddr string) string {
	text, _ := testsupport.Metrics("http://" + adminAddr)
	return text
}
