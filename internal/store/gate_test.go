package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookkeeper/hookkeeper/internal/store"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// A gate of width 2 lets two connects start, holds the third until one ends (or its
// context does), and a connect that ended gives its slot back.
func TestConnectGateWaitsForASlot(t *testing.T) {
	t.Parallel()
	gate := store.NewConnectGate(2)
	start := func(ctx context.Context) context.Context {
		return gate.TraceConnectStart(ctx, pgx.TraceConnectStartData{})
	}
	first := start(context.Background())
	start(context.Background())

	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	begin := time.Now()
	third := start(short)
	if waited := time.Since(begin); waited < 90*time.Millisecond {
		t.Fatalf("a third connect started after %s with both slots taken", waited)
	}
	gate.TraceConnectEnd(third, pgx.TraceConnectEndData{}) // it never got a slot: gives none back

	gate.TraceConnectEnd(first, pgx.TraceConnectEndData{})
	got := make(chan struct{})
	go func() {
		start(context.Background())
		close(got)
	}()
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the slot a finished connect gave back was not taken")
	}
}

// Pools of one database behind one narrow gate all connect, and connects that fail
// (nothing listens on the port) give their slots back.
func TestConnectGateWithPools(t *testing.T) {
	t.Parallel()
	url := testsupport.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const width = 2
	gate := store.NewConnectGate(width)
	open := func(url string) interface{ Ping(context.Context) error } {
		p, err := store.NewPool(ctx, url, store.PoolOptions{MaxConns: 2, Gate: gate})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	var wg sync.WaitGroup
	errs := make(chan error, 12)
	for range 12 {
		p := open(url)
		wg.Go(func() { errs <- p.Ping(ctx) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("ping behind the gate: %v", err)
		}
	}

	dead := open("postgres://postgres@127.0.0.1:1/postgres?sslmode=disable")
	for range width + 1 {
		if dead.Ping(ctx) == nil {
			t.Fatal("ping of a closed port succeeded")
		}
	}
	pingCtx, cancelPing := context.WithTimeout(ctx, 10*time.Second)
	defer cancelPing()
	if err := open(url).Ping(pingCtx); err != nil {
		t.Fatalf("after failed connects the gate holds no free slot: %v", err)
	}
}
