package devcluster

import (
	"context"
	"errors"
	"io"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/demo"
)

// RunDemo sends the scripted series of signed Stripe webhooks to the sample's receiver
// and prints, per step, the HTTP statuses, the stored outcome, the order's state, the
// outbox rows and their delivery.
func RunDemo(ctx context.Context, s *Session, out io.Writer) error {
	if s.Samples == nil || len(s.Samples.Endpoints) == 0 {
		return errors.New("demo: no sample endpoint applied")
	}
	var ep *v1alpha1.WebhookEndpoint
	for _, e := range s.Samples.Endpoints {
		if e.Spec.Provider.Type == v1alpha1.ProviderStripe {
			ep = e
		}
	}
	if ep == nil {
		return errors.New("demo: the samples have no Stripe endpoint")
	}
	url, err := s.Samples.ReceiverURL(s.Proxy, ep)
	if err != nil {
		return err
	}
	namespace := ep.Namespace
	if namespace == "" {
		namespace = s.Samples.Namespace
	}
	return demo.Run(ctx, demo.Target{
		URL:         url,
		Secret:      s.Samples.SigningSecrets[ep.Name],
		Endpoint:    namespace + "/" + ep.Name,
		Schema:      ep.Spec.Database.Schema,
		DatabaseURL: s.DatabaseURL,
		Sink:        s.Sink,
	}, out)
}
