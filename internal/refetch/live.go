package refetch

import (
	"context"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/receipt"
)

// LiveFunc adapts f to the receipt transaction (receipt.WithLive): the guard's `live` is
// the fetched object and the receipt's detail names it and its status; a rejection
// (ErrNotFound, ErrUnsupported) becomes receipt.LiveRejected, so the event is recorded
// as guard_failed; any other error fails the request, and the receiver answers 503.
func LiveFunc(f Fetcher) receipt.LiveFunc {
	return func(ctx context.Context, ev receipt.Event) (any, error) {
		l, err := f.Fetch(ctx, ev)
		if err != nil {
			if IsRejection(err) {
				return nil, &receipt.LiveRejected{Detail: err.Error()}
			}
			return nil, err
		}
		return receipt.LiveValue{Value: l.Object, Detail: l.Detail()}, nil
	}
}

// RecorderOptions are the receipt.Recorder options of provider's refetch block, with the
// API key from config.EnvRefetchAPIKey: none when there is no block. Every process that
// runs the receipt transaction (receiver, replay) passes them, so `live` is the same
// everywhere.
func RecorderOptions(provider v1alpha1.ProviderSpec, getenv func(string) string, opts Options) ([]receipt.Option, error) {
	r, err := FromEnv(provider, getenv, opts)
	if err != nil || r == nil {
		return nil, err
	}
	return []receipt.Option{receipt.WithLive(LiveFunc(r))}, nil
}
