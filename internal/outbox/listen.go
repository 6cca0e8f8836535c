package outbox

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"

	"github.com/hookkeeper/hookkeeper/internal/store"
)

// NotifyChannel is the channel that Notify (sent after a commit that wrote outbox rows,
// and after a replay) notifies; the payload is the endpoint key.
const NotifyChannel = "hookkeeper_outbox"

// Listener is one LISTEN connection that wakes every dispatcher of a process whose
// endpoint shares its database: a receiver pool serving many endpoints would otherwise
// hold one idle LISTEN session per endpoint. A dispatcher whose Options.Listener is set
// subscribes to it; one without runs a Listener of its own. It reconnects after a loss
// and wakes every subscriber on every (re)connect, since notifications sent while it was
// away are gone; the dispatchers' poll covers the time it is disconnected.
type Listener struct {
	cfg *pgx.ConnConfig
	log logr.Logger

	mu   sync.Mutex
	subs map[string]map[*func()]struct{}
}

// NewListener returns a Listener for the database of url; nothing connects until Run.
// Its error never contains the URL.
func NewListener(url string, log logr.Logger) (*Listener, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, errors.New("database URL is not a valid PostgreSQL connection string")
	}
	cfg.ConnectTimeout = store.ConnectTimeout
	return newListener(cfg, log), nil
}

func newListener(cfg *pgx.ConnConfig, log logr.Logger) *Listener {
	return &Listener{cfg: cfg, log: log, subs: map[string]map[*func()]struct{}{}}
}

// subscribe calls wake for every notification of endpoint (and on every reconnect)
// until the returned function runs.
func (l *Listener) subscribe(endpoint string, wake func()) func() {
	key := &wake
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.subs[endpoint] == nil {
		l.subs[endpoint] = map[*func()]struct{}{}
	}
	l.subs[endpoint][key] = struct{}{}
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.subs[endpoint], key)
		if len(l.subs[endpoint]) == 0 {
			delete(l.subs, endpoint)
		}
	}
}

// wake calls the subscribers of endpoint, or every subscriber when all is true.
func (l *Listener) wake(endpoint string, all bool) {
	l.mu.Lock()
	var fns []func()
	for ep, subs := range l.subs {
		if all || ep == endpoint {
			for fn := range subs {
				fns = append(fns, *fn)
			}
		}
	}
	l.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// Run keeps the LISTEN connection until ctx ends, then returns nil.
func (l *Listener) Run(ctx context.Context) error {
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		lost := l.listenOnce(ctx)
		if ctx.Err() != nil {
			break // stopping, not lost
		}
		backoff = min(max(2*backoff, 200*time.Millisecond), 10*time.Second)
		l.log.Error(lost, "shared LISTEN connection lost; dispatchers poll until it is back", "reconnectIn", backoff)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
	}
	return nil //nolint:nilerr // ending with ctx is not a failure; each lost connection was logged and retried
}

func (l *Listener) listenOnce(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, l.cfg.Copy())
	if err != nil {
		return err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		return err
	}
	l.wake("", true)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		l.wake(n.Payload, false)
	}
}
