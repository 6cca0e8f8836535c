// Package refetch confirms the provider's current state of the object an event names
// before a critical transition moves money (spec.provider.refetch).
//
// A signed webhook proves who sent it, not that what it says is still true: events
// arrive late, out of order, and a replayed or mis-rendered event can claim a state the
// object never reached. For the transitions listed in spec.provider.refetch.transitions
// the receiver asks the provider's read API for the object first, and the transition's
// guard sees the answer as `live`, e.g.
//
//	live.status == "succeeded" && live.amount_received == entity.amount
//
// The fetch runs before the receipt transaction, outside any lock, with a per-call
// timeout. Its failures map onto the receiver's contract:
//
//   - the provider did not answer usably (transport error, timeout, 5xx, 429): an error
//     wrapping ErrUnavailable; the receiver answers 503, stores nothing, and the
//     provider's retry completes the delivery;
//   - the API key is rejected (401/403): ErrUnauthorized, which also wraps
//     ErrUnavailable (503 while a person fixes the key) and is logged once per call
//     without the key;
//   - the object does not exist (404): ErrNotFound, a rejection: the receipt is
//     recorded as guard_failed with the detail "refetch: object pi_123 not found";
//   - the event names no object this package can fetch: ErrUnsupported, likewise a
//     rejection (a retry would get the same answer).
//
// The API key never appears in logs, errors or metrics: it only ever goes into the
// Authorization header of the outgoing request.
package refetch

import (
	"context"
	"errors"
	"fmt"

	"github.com/hookkeeper/hookkeeper/internal/event"
)

// Event is the verified event whose object is fetched; Body (the parsed payload) and
// Type are what a Fetcher reads.
type Event = event.Event

// Live is the provider's current object.
type Live struct {
	// Object is the fetched object, JSON-shaped for CEL (integral numbers are int64):
	// the guard's `live` variable.
	Object map[string]any
	// ObjectType is the provider's object type ("payment_intent", "checkout.session").
	ObjectType string
	// ObjectID is the provider's id of the object ("pi_123").
	ObjectID string
	// Status is the object's status field, empty when it has none.
	Status string
}

// Detail describes the fetch for the receipt's detail column: which object was
// confirmed and in which state. It names ids and states, never amounts or the payload.
func (l Live) Detail() string {
	if l.Status == "" {
		return fmt.Sprintf("refetch: %s %s fetched", l.ObjectType, l.ObjectID)
	}
	return fmt.Sprintf("refetch: %s %s is %s", l.ObjectType, l.ObjectID, l.Status)
}

// Fetcher fetches the provider's current object for an event.
type Fetcher interface {
	Fetch(ctx context.Context, ev Event) (Live, error)
}

// The error kinds of a fetch; test them with errors.Is.
var (
	// ErrUnavailable: the provider did not answer usably; retry later (503).
	ErrUnavailable = errors.New("refetch: provider API unavailable")
	// ErrUnauthorized: the provider rejected the API key (also ErrUnavailable).
	ErrUnauthorized = errors.New("refetch: provider rejected the API key")
	// ErrNotFound: the object the event names does not exist (a rejection).
	ErrNotFound = errors.New("refetch: object not found")
	// ErrUnsupported: the event names no object that can be fetched (a rejection).
	ErrUnsupported = errors.New("refetch: the event names no fetchable object")
)

// IsRejection reports whether err is the provider's answer about the event (not found,
// or nothing to fetch) rather than a failure: the event is recorded as guard_failed
// instead of failing the request, because a retry would get the same answer.
func IsRejection(err error) bool {
	return errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnsupported)
}

// fetchError carries a message of its own (naming the object, never the key) and the
// kinds it belongs to.
type fetchError struct {
	msg   string
	kinds []error
}

func (e *fetchError) Error() string   { return e.msg }
func (e *fetchError) Unwrap() []error { return e.kinds }

func newError(kinds []error, format string, args ...any) error {
	return &fetchError{msg: fmt.Sprintf(format, args...), kinds: kinds}
}

var (
	unavailable  = []error{ErrUnavailable}
	unauthorized = []error{ErrUnauthorized, ErrUnavailable}
	notFound     = []error{ErrNotFound}
	unsupported  = []error{ErrUnsupported}
)
