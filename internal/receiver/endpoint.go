package receiver

import (
	"net/http"

	"github.com/go-logr/logr"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/outbox"
)

// HandlerFor builds the webhook handler of a compiled endpoint: its path, body cap,
// verifier, extractor and the provider's acknowledgement.
func HandlerFor(ep *config.Endpoint, rec Recorder, log logr.Logger) (http.Handler, error) {
	return NewHandler(HandlerOptions{
		Endpoint:     ep.Key(),
		Path:         ep.Spec.Receiver.Path,
		MaxBodyBytes: ep.Spec.Receiver.MaxBodyBytes,
		Verifier:     ep.Verifier,
		Extractor:    ep.Extractor,
		Recorder:     rec,
		Ack:          AckFor(ep.Spec.Provider.Type),
		Logger:       log,
	})
}

// AckFor is the acknowledgement a provider expects. Adyen requires the literal
// "[accepted]"; the others take any 2xx, and get a small JSON that says whether the
// delivery was a duplicate.
func AckFor(provider v1alpha1.ProviderType) Ack {
	if provider == v1alpha1.ProviderAdyen {
		contentType, body := config.AckBody(provider)
		return Ack{ContentType: contentType, Body: body}
	}
	return Ack{}
}

// DispatcherOptions maps spec.delivery of a compiled endpoint onto the dispatcher's
// options.
func DispatcherOptions(ep *config.Endpoint, log logr.Logger) outbox.Options {
	d := ep.Spec.Delivery
	o := outbox.Options{
		Endpoint:    ep.Key(),
		Tables:      ep.Tables,
		SinkURL:     ep.SinkURL,
		SigningKey:  ep.DeliverySecret,
		MaxAttempts: int(d.MaxAttempts),
		Ordering:    d.Ordering,
		Concurrency: int(d.Concurrency),
		Logger:      log,
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
