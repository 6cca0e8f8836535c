package outbox

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// A claim that returns late (here it waits for a table lock after its transaction,
// and so its lease, began) must not start a POST that outlives the lease: once the
// lease ends another dispatcher may claim and post the same row. The sink checks, while
// each request is still in flight, that the row's lease has not ended.
func TestSlowClaimNeverPostsPastTheLease(t *testing.T) {
	db := newTestDB(t)
	ids := db.insert(t, outboxRow{Entity: "ord_1", Seq: 0})
	ctx := context.Background()

	// The dispatcher's pool sends each statement in one round trip (parse, bind,
	// execute in one implicit transaction), so the claim's now() is taken before it
	// waits for the lock, as it is for any statement that is slow to run or to answer.
	pool := db.openPool(t, 4, func(cfg *pgxpool.Config) { cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec })

	const (
		lease     = 3 * time.Second
		timeout   = time.Second
		claimWait = 2500 * time.Millisecond
		sinkHold  = 900 * time.Millisecond
	)
	var began time.Time
	var mu sync.Mutex
	var violations []string
	var s *sink
	s = newSink(t, func(a arrival, n int) int {
		// The attempt this request belongs to, and later whether its lease still holds.
		q := fmt.Sprintf(`SELECT attempts, COALESCE(extract(epoch FROM lease_until - clock_timestamp()), -1)::float8
			FROM %s WHERE id = $1`, db.tables.Outbox)
		var attempt, attemptAtEnd int
		var leaseLeft float64
		errStart := db.pool.QueryRow(ctx, q, ids[0]).Scan(&attempt, &leaseLeft)
		select {
		case <-time.After(sinkHold): // a slow sink, within the attempt timeout
		case <-s.release:
		}
		errEnd := db.pool.QueryRow(ctx, q, ids[0]).Scan(&attemptAtEnd, &leaseLeft)
		t.Logf("request %d (attempt %d): arrived %s after start; at its end the attempt is %d, lease left %.3fs",
			n, attempt, a.At.Sub(began).Round(time.Millisecond), attemptAtEnd, leaseLeft)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case errStart != nil || errEnd != nil:
			violations = append(violations, fmt.Sprintf("request %d: read lease: %v %v", n, errStart, errEnd))
		case attemptAtEnd != attempt:
			violations = append(violations, fmt.Sprintf("request %d (attempt %d) still in flight after its lease ended and attempt %d claimed the row",
				n, attempt, attemptAtEnd))
		case leaseLeft <= 0:
			violations = append(violations, fmt.Sprintf("request %d still in flight %.2fs after its lease ended", n, -leaseLeft))
		}
		return http.StatusOK
	})

	// Hold a lock every claim needs, start the dispatcher, and release the lock once
	// its claim has waited claimWait.
	lockConn, err := pgx.Connect(ctx, db.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lockConn.Close(context.Background()) })
	lockTx, err := lockConn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockTx.Exec(ctx, `LOCK TABLE `+db.tables.Outbox+` IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	opts := db.options(t, s.srv.URL)
	opts.Lease, opts.Timeout = lease, timeout
	began = time.Now()
	_, stop := start(t, pool, opts)
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "the claim to wait for the lock", func() bool {
		var waiting int
		err := db.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE relation = $1::regclass AND NOT granted`,
			db.tables.Outbox).Scan(&waiting)
		return err == nil && waiting > 0
	})
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "the claim to have waited long enough", func() bool { return time.Since(began) >= claimWait })
	if err := lockTx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	testsupport.Eventually(t, 20*time.Second, 10*time.Millisecond, "the row to be delivered", func() bool { return db.state(t, ids[0]).Delivered })
	stop()
	mu.Lock()
	defer mu.Unlock()
	for _, v := range violations {
		t.Error(v)
	}
	s.mu.Lock()
	overlap := len(s.overlap)
	s.mu.Unlock()
	if overlap > 0 {
		t.Errorf("the row was posted twice at once")
	}
	if got := s.count(); got != 1 {
		t.Errorf("sink got %d requests, want 1", got)
	}
}
