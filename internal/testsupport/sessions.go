package testsupport

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// SessionKiller terminates the busy PostgreSQL sessions of one application_name, one at
// a time, as a crash of the database side would end them mid-transaction.
//
// It strikes every millisecond or three, but after each kill it waits for one Progress
// call: on a loaded machine, where a transaction takes longer than the pause, a killer on
// a clock alone would end every transaction and the test would measure the machine, not
// the code under test.
type SessionKiller struct {
	progress chan struct{}
	stop     chan struct{}
	done     sync.WaitGroup
	killed   atomic.Int64
}

// KillSessions starts a SessionKiller on the sessions of db's database whose
// application_name is application, using db (which it must not share with the sessions
// it kills).
func KillSessions(ctx context.Context, db *pgxpool.Pool, application string) *SessionKiller {
	k := &SessionKiller{progress: make(chan struct{}, 1), stop: make(chan struct{})}
	k.done.Go(func() {
		for {
			select {
			case <-k.stop:
				return
			case <-time.After(time.Duration(1+rand.IntN(3)) * time.Millisecond): //nolint:gosec // jitter for a test, not a secret
			}
			select { // the progress that counts is one made after this kill
			case <-k.progress:
			default:
			}
			var n int64
			_ = db.QueryRow(ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE datname = current_database() AND application_name = $1 AND state <> 'idle' ORDER BY random() LIMIT 1) x`, application).Scan(&n)
			if n == 0 {
				continue
			}
			k.killed.Add(n)
			select {
			case <-k.stop:
				return
			case <-k.progress:
			}
		}
	})
	return k
}

// Progress tells the killer the code under test acknowledged something since the last
// kill; it never blocks. On a nil killer (a run that kills nothing) it does nothing.
func (k *SessionKiller) Progress() {
	if k == nil {
		return
	}
	select {
	case k.progress <- struct{}{}:
	default:
	}
}

// Stop ends the killer and returns how many sessions it terminated (0 for a nil one).
func (k *SessionKiller) Stop() int64 {
	if k == nil {
		return 0
	}
	close(k.stop)
	k.done.Wait()
	return k.killed.Load()
}
