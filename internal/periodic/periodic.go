// Package periodic runs the data plane's background work on a fixed interval: parking
// expiry (internal/receipt), retention pruning (internal/retention), the outbox's
// backlog gauges (internal/outbox) and a receiver pool's heartbeats
// (internal/dataplanecmd).
package periodic

import (
	"context"
	"time"
)

// Run calls work now and then every interval until ctx ends, handing each result (or
// error: the next run tries again) to report. A run cut short by ctx's end is not
// reported. It returns nil when ctx ends.
func Run[R any](ctx context.Context, interval time.Duration, work func(context.Context) (R, error), report func(R, error)) error {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		res, err := work(ctx)
		if ctx.Err() != nil {
			return nil
		}
		report(res, err)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}
