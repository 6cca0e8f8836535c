package outbox

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// NotifyChannel is the channel that Notify (sent after a commit that wrote outbox rows,
// and after a replay) notifies; the payload is the endpoint key.
const NotifyChannel = "hookkeeper_outbox"

// listen keeps a dedicated connection LISTENing on NotifyChannel and wakes the claim
// loop for this endpoint's notifications. It reconnects after a loss and wakes once on
// every (re)connect, since notifications sent while it was away are gone. The poll
// interval covers the time it is disconnected.
func (d *Dispatcher) listen(ctx context.Context) {
	log := d.opts.Logger.WithValues("endpoint", d.opts.Endpoint)
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		err := d.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		backoff = min(max(2*backoff, 200*time.Millisecond), 10*time.Second)
		log.Error(err, "LISTEN connection lost; polling until it is back", "reconnectIn", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
}

func (d *Dispatcher) listenOnce(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, d.pool.Config().ConnConfig.Copy())
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
	// Rows committed before LISTEN took effect sent their notifications to nobody.
	d.signal()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if n.Payload == d.opts.Endpoint {
			d.signal()
		}
	}
}
