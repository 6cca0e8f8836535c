package receiver

import (
	"net/http"

	"github.com/go-logr/logr"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
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
		Handshake: func(body []byte) (string, []byte, bool) {
			return config.Handshake(ep.Spec.Provider.Type, body)
		},
		Logger: log,
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
