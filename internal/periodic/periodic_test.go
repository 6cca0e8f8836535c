package periodic_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/internal/periodic"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// Run reports every run's result and error, runs again after an error, and stops when
// the context ends without reporting the run it cut short.
func TestRunReportsEachRunAndStopsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	boom := errors.New("boom")
	runs := 0
	var got []int
	var errs []error
	done := make(chan error, 1)
	go func() {
		done <- periodic.Run(ctx, time.Millisecond, func(context.Context) (int, error) {
			runs++
			switch runs {
			case 2:
				return 0, boom
			case 4:
				cancel()
				return 4, nil
			}
			return runs, nil
		}, func(n int, err error) {
			got = append(got, n)
			errs = append(errs, err)
		})
	}()
	if err := testsupport.Await(t, done, 10*time.Second, "Run to return after its context ended"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if want := []int{1, 0, 3}; !slices.Equal(got, want) {
		t.Fatalf("reported %v, want %v (the 4th run ended with the context)", got, want)
	}
	if errs[0] != nil || !errors.Is(errs[1], boom) || errs[2] != nil {
		t.Fatalf("errors %v: the 2nd run's error is reported and the loop goes on", errs)
	}
}
