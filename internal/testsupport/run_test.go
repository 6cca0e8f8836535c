package testsupport

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A Running reports nothing while run runs, and once run has returned says so with
// what it returned, to every caller: WaitReady's poll and Stop read the same error.
func TestRunningKeepsWhatRunReturned(t *testing.T) {
	failed := errors.New("listen: address in use")
	r := Run(t, context.Background(), "receiver", time.Minute, func(context.Context) error { return failed })
	<-r.Done()
	for range 2 {
		if err := r.Exited(); !errors.Is(err, failed) {
			t.Fatalf("Exited = %v, want %v", err, failed)
		}
	}
	if err := r.Stop(t); !errors.Is(err, failed) {
		t.Errorf("Stop = %v, want %v", err, failed)
	}

	blocked := Run(t, context.Background(), "server", time.Minute, func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	})
	if err := blocked.Exited(); err != nil {
		t.Fatalf("Exited = %v while run runs, want nil", err)
	}
	if err := blocked.Stop(t); !errors.Is(err, context.Canceled) {
		t.Errorf("Stop = %v, want the cancelled context's error", err)
	}
	if err := blocked.Stop(t); !errors.Is(err, context.Canceled) {
		t.Errorf("a second Stop = %v, want what the first returned", err)
	}
}
