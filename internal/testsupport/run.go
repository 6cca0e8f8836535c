package testsupport

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// Running is a server or command a test runs in this process, in a goroutine of its
// own (a receiver's dataplanecmd.Serve, a cobra command's ExecuteContext), until Stop
// cancels its context.
type Running struct {
	what    string
	grace   time.Duration
	cancel  context.CancelFunc
	done    chan struct{}
	err     error // what run returned, once done is closed
	stop    sync.Once
	stopErr error // what Stop returns
}

// Run calls run in a goroutine of its own with a context derived from ctx that Stop
// cancels, and stops it when the test ends at the latest. what names it in failure
// messages ("receiver"); grace is how long Stop waits for run to return.
func Run(tb testing.TB, ctx context.Context, what string, grace time.Duration, run func(ctx context.Context) error) *Running {
	tb.Helper()
	ctx, cancel := context.WithCancel(ctx)
	r := &Running{what: what, grace: grace, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = run(ctx)
	}()
	tb.Cleanup(func() { _ = r.Stop(tb) })
	return r
}

// Done is closed once run has returned.
func (r *Running) Done() <-chan struct{} { return r.done }

// Exited returns nil while run runs and, once it has returned, an error that says so
// with what it returned: the exited of WaitReady.
func (r *Running) Exited() error {
	select {
	case <-r.done:
		if r.err == nil {
			return fmt.Errorf("%s exited", r.what)
		}
		return fmt.Errorf("%s exited: %w", r.what, r.err)
	default:
		return nil
	}
}

// Stop cancels run's context and returns what run returned. When run has not returned
// within the grace period it fails tb (with Errorf, so that it may be called from any
// goroutine) and returns that error instead. Only the first call waits; later ones
// return what it returned.
func (r *Running) Stop(tb testing.TB) error {
	tb.Helper()
	r.stop.Do(func() {
		r.cancel()
		select {
		case <-r.done:
			r.stopErr = r.err
		case <-time.After(r.grace):
			r.stopErr = fmt.Errorf("the %s did not stop within %s", r.what, r.grace)
			tb.Error(r.stopErr)
		}
	})
	return r.stopErr
}
