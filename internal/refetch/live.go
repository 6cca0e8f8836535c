package refetch

import (
	"context"

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
