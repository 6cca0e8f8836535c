package receiver

import (
	"fmt"
	"net/http"

	"github.com/go-logr/logr"

	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/provider"
)

// HandlerFor builds the webhook handler of a compiled endpoint: its path, body cap,
// verifier, extractor, and its provider's acknowledgement and handshake.
func HandlerFor(ep *config.Endpoint, rec Recorder, log logr.Logger) (http.Handler, error) {
	p, ok := provider.Lookup(ep.Spec.Provider.Type)
	if !ok {
		return nil, fmt.Errorf("unknown provider %q", ep.Spec.Provider.Type)
	}
	return NewHandler(HandlerOptions{
		Endpoint:     ep.Key(),
		Path:         ep.Spec.Receiver.Path,
		MaxBodyBytes: ep.Spec.Receiver.MaxBodyBytes,
		Verifier:     ep.Verifier,
		Extractor:    ep.Extractor,
		Recorder:     rec,
		Ack:          p.Ack,
		Handshake:    p.Handshake,
		Logger:       log,
	})
}
