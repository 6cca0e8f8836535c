package testsupport

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// Condition is what Eventually polls: a func() error holds when it returns nil (its
// last error is the failure message), a func() bool when it returns true.
type Condition interface {
	func() error | func() bool
}

// Eventually calls cond every interval until it holds, and fails tb (with what and
// cond's last error) when timeout passes first. It is the one way tests wait.
func Eventually[C Condition](tb testing.TB, timeout, interval time.Duration, what string, cond C) {
	tb.Helper()
	if err := Poll(context.Background(), timeout, interval, asError(cond)); err != nil {
		tb.Fatalf("waiting for %s: %v", what, err)
	}
}

// Poll is Eventually for code that may not fail the test itself (a goroutine, a helper
// that returns errors): it calls cond every interval until it returns nil, and returns
// cond's last error when timeout passes first, or ctx's when ctx ends; an error cond
// marks Final ends the wait at once.
func Poll(ctx context.Context, timeout, interval time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		var final finalError
		if errors.As(err, &final) {
			return final.error
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// Await waits until done yields what a goroutine (a server's Serve, a command's run)
// returned, and fails tb with what when timeout passes first.
func Await(tb testing.TB, done <-chan error, timeout time.Duration, what string) error {
	tb.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		tb.Fatalf("waiting for %s: timed out after %s", what, timeout)
		return nil
	}
}

// Final marks err as one that waiting longer cannot change (what the condition waits
// for has exited): Poll returns it at once, and Eventually fails with it.
func Final(err error) error { return finalError{err} }

type finalError struct{ error }

func (e finalError) Unwrap() error { return e.error }

var errNotYet = errors.New("the condition never held")

func asError[C Condition](cond C) func() error {
	switch c := any(cond).(type) {
	case func() error:
		return c
	case func() bool:
		return func() error {
			if c() {
				return nil
			}
			return errNotYet
		}
	}
	panic("unreachable")
}
