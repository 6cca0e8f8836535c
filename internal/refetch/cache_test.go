package refetch

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func answer(status string) Live {
	return Live{ObjectID: "pi_1", ObjectType: "payment_intent", Status: status}
}

func TestCacheTTL(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_767_225_600, 0)}
	c := newCache(2*time.Second, clock.Now)
	var calls atomic.Int64
	fetch := func(context.Context) (Live, error) { calls.Add(1); return answer("succeeded"), nil }

	for range 3 {
		if _, err := c.get(context.Background(), "pi_1", "succeeded", fetch); err != nil {
			t.Fatal(err)
		}
	}
	if got := calls.Load(); got != 1 {
		t.Fatalf("%d fetches within the TTL, want 1", got)
	}
	clock.advance(2 * time.Second)
	if _, err := c.get(context.Background(), "pi_1", "succeeded", fetch); err != nil {
		t.Fatal(err)
	}
	if got := calls.Load(); got != 2 {
		t.Fatalf("%d fetches after the TTL, want 2", got)
	}
	// Another object never shares the entry.
	if _, err := c.get(context.Background(), "pi_2", "succeeded", fetch); err != nil {
		t.Fatal(err)
	}
	if got := calls.Load(); got != 3 {
		t.Fatalf("%d fetches for a second object, want 3", got)
	}
}

func TestCacheNeverStoresErrors(t *testing.T) {
	c := newCache(time.Minute, time.Now)
	var calls atomic.Int64
	boom := newError(unavailable, "refetch: payment_intent pi_1: Stripe answered 500")
	fetch := func(context.Context) (Live, error) { calls.Add(1); return Live{}, boom }
	for range 2 {
		if _, err := c.get(context.Background(), "pi_1", "", fetch); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("err = %v", err)
		}
	}
	if got := calls.Load(); got != 2 {
		t.Fatalf("%d fetches, want 2: a failure must not be cached", got)
	}
}

// A call already in flight when an event arrives may predate the change the event
// reports; its answer is used only when it agrees with the event.
func TestCacheDoesNotTrustAnEarlierCallThatDisagrees(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_767_225_600, 0)}
	c := newCache(time.Minute, clock.Now)

	firstStarted := make(chan struct{})
	releaseFirst := make(chan struct{})
	var calls atomic.Int64
	fetch := func(context.Context) (Live, error) {
		if calls.Add(1) == 1 {
			close(firstStarted)
			<-releaseFirst
			return answer("processing"), nil
		}
		return answer("succeeded"), nil
	}

	processing := make(chan Live, 1)
	go func() {
		l, _ := c.get(context.Background(), "pi_1", "processing", fetch)
		processing <- l
	}()
	<-firstStarted
	clock.advance(time.Millisecond) // the succeeded event arrives after the call began

	succeeded := make(chan Live, 1)
	go func() {
		l, _ := c.get(context.Background(), "pi_1", "succeeded", fetch)
		succeeded <- l
	}()
	close(releaseFirst)

	if l := <-processing; l.Status != "processing" {
		t.Errorf("the processing event got %q", l.Status)
	}
	if l := <-succeeded; l.Status != "succeeded" {
		t.Errorf("the succeeded event got %q from a call that began before it arrived", l.Status)
	}
	if got := calls.Load(); got != 2 {
		t.Errorf("%d fetches, want 2", got)
	}
}

func TestCacheWaiterGivesUpAlone(t *testing.T) {
	c := newCache(time.Minute, time.Now)
	release := make(chan struct{})
	started := make(chan struct{})
	fetch := func(context.Context) (Live, error) {
		close(started)
		<-release
		return answer("succeeded"), nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := c.get(ctx, "pi_1", "succeeded", fetch)
		gaveUp <- err
	}()
	<-started
	other := make(chan error, 1)
	go func() {
		_, err := c.get(context.Background(), "pi_1", "succeeded", fetch)
		other <- err
	}()
	cancel()
	if err := <-gaveUp; !errors.Is(err, ErrUnavailable) {
		t.Errorf("the cancelled waiter got %v, want ErrUnavailable", err)
	}
	close(release)
	if err := <-other; err != nil {
		t.Errorf("the other waiter failed with %v: one waiter giving up must not fail the call", err)
	}
}
