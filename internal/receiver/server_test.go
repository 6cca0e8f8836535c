package receiver_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookkeeper/hookkeeper/internal/receiver"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// TestTasksStopOnlyAfterTheLastRequest checks the shutdown order: /readyz fails, the
// in-flight request finishes, and only then do background tasks (the dispatcher) stop.
func TestTasksStopOnlyAfterTheLastRequest(t *testing.T) {
	pool := openPool(t, testsupport.NewDatabase(t), 2)

	entered, release := make(chan struct{}), make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(entered)
		<-release
		w.WriteHeader(http.StatusOK)
	})
	var taskStarted, taskStopped atomic.Bool
	srv, err := receiver.NewServer(receiver.ServerOptions{
		Webhook: slow, DB: pool, Gatherer: prometheus.NewRegistry(), Logger: logr.Discard(),
		Tasks: []receiver.Task{{Name: "dispatcher", Run: func(ctx context.Context) error {
			taskStarted.Store(true)
			<-ctx.Done()
			taskStopped.Store(true)
			return nil
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	s := serve(t, srv)

	code := make(chan int, 1)
	go func() {
		resp, err := http.Post(s.base+"/", "application/json", strings.NewReader("{}"))
		if err != nil {
			code <- 0
			return
		}
		_ = resp.Body.Close()
		code <- resp.StatusCode
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the handler")
	}
	testsupport.Eventually(t, 15*time.Second, 20*time.Millisecond, "the task to start", taskStarted.Load)

	stopped := s.drain(t)
	if taskStopped.Load() {
		t.Fatal("the task was stopped while a request was still in flight")
	}
	close(release)
	if c := <-code; c != http.StatusOK {
		t.Fatalf("in-flight request: %d, want 200", c)
	}
	if err := testsupport.Await(t, stopped, 10*time.Second, "the server to stop"); err != nil {
		t.Fatalf("serve: %v", err)
	}
	if !taskStopped.Load() {
		t.Error("the task was not stopped")
	}
}

func TestAFailingTaskStopsTheServer(t *testing.T) {
	pool := openPool(t, testsupport.NewDatabase(t), 2)
	srv, err := receiver.NewServer(receiver.ServerOptions{
		Webhook: http.NotFoundHandler(), DB: pool, Gatherer: prometheus.NewRegistry(), Logger: logr.Discard(),
		Tasks: []receiver.Task{{Name: "dispatcher", Run: func(context.Context) error {
			return errors.New("sink URL is not usable")
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background(), listen(t), listen(t)) }()
	err = testsupport.Await(t, done, 10*time.Second, "a failed task to stop the server")
	if err == nil || !strings.Contains(err.Error(), "dispatcher: sink URL is not usable") {
		t.Fatalf("serve returned %v, want the dispatcher's error", err)
	}
}
