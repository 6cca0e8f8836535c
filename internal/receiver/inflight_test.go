package receiver_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookkeeper/hookkeeper/internal/receiver"
)

// A dedicated receiver (dataplanecmd.Serve) wires its server exactly like this:
// PerEndpointLimits true (the unit's handler carries LimitInFlight with
// spec.receiver.maxInFlight) and no MaxInFlight. An endpoint whose maxInFlight is 100
// must admit 100 requests at once: a server that put a cap of its own in front of it
// (DefaultMaxInFlight, 64) would answer the 65th with 503.
func TestDedicatedReceiverHonoursItsOwnMaxInFlight(t *testing.T) {
	const endpointLimit, concurrent = 100, 80
	var entered atomic.Int32
	release := make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered.Add(1)
		<-release
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	})
	handler := receiver.LimitInFlight(slow, "test/dedicated", endpointLimit, (&logBuffer{}).logger())
	srv, err := receiver.NewServer(receiver.ServerOptions{
		Webhook: handler, Endpoint: "test/dedicated", PerEndpointLimits: true,
		Ready:    func(context.Context) error { return nil },
		Gatherer: prometheus.NewRegistry(), Logger: (&logBuffer{}).logger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, srv).base + "/"

	var refused atomic.Int32
	var wg sync.WaitGroup
	var once sync.Once
	defer wg.Wait()
	defer once.Do(func() { close(release) })
	for range concurrent {
		wg.Go(func() {
			resp, err := http.Post(url, "application/json", strings.NewReader("{}"))
			if err != nil {
				return
			}
			if resp.StatusCode == http.StatusServiceUnavailable {
				refused.Add(1)
			}
			_ = resp.Body.Close()
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && int(entered.Load()+refused.Load()) < concurrent {
		time.Sleep(10 * time.Millisecond)
	}
	once.Do(func() { close(release) })
	wg.Wait()
	if n := refused.Load(); n != 0 {
		t.Errorf("%d of %d concurrent requests refused with 503 under an endpoint maxInFlight of %d (%d reached the handler)",
			n, concurrent, endpointLimit, entered.Load())
	}
}
