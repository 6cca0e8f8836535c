package testsupport

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A Final error ends the wait at the call that returns it, not at the timeout.
func TestPollReturnsAFinalErrorAtOnce(t *testing.T) {
	gone := errors.New("the process exited")
	calls := 0
	start := time.Now()
	err := Poll(context.Background(), time.Minute, time.Millisecond, func() error {
		calls++
		if calls == 3 {
			return Final(gone)
		}
		return errors.New("not yet")
	})
	if !errors.Is(err, gone) || calls != 3 {
		t.Fatalf("Poll = %v after %d calls, want %v after 3", err, calls, gone)
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Errorf("Poll waited %s for a Final error", waited)
	}
}
