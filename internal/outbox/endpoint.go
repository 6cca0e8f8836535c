package outbox

import (
	"github.com/hookkeeper/hookkeeper/internal/config"
)

// FromEndpoint returns the dispatcher options of a compiled endpoint: its key, schema,
// sink, delivery key and spec.delivery knobs. Logger, Clock and the other process-level
// knobs are left for the caller; zero values take the defaults.
func FromEndpoint(ep *config.Endpoint) Options {
	d := ep.Spec.Delivery
	o := Options{
		Endpoint:    ep.Key(),
		Tables:      ep.Tables,
		SinkURL:     ep.SinkURL,
		SigningKey:  ep.DeliverySecret,
		MaxAttempts: int(d.MaxAttempts),
		Ordering:    d.Ordering,
		Concurrency: int(d.Concurrency),
	}
	if d.Backoff.Initial != nil {
		o.BackoffInitial = d.Backoff.Initial.Duration
	}
	if d.Backoff.Max != nil {
		o.BackoffMax = d.Backoff.Max.Duration
	}
	if d.Timeout != nil {
		o.Timeout = d.Timeout.Duration
	}
	return o
}
