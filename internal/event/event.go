// Package event holds Event, the provider-neutral description of one authentic webhook
// event. It is a leaf package so that config (which extracts events) and receipt (which
// records them) can share the type without importing each other; receipt.Event is an
// alias of it.
package event

import (
	"encoding/json"
	"time"
)

// Event is one webhook event, extracted from a verified request. An Adyen batch yields
// one Event per notification item; every other provider yields one per request.
type Event struct {
	// ID is the provider's stable event id; with the endpoint it is the dedupe key.
	ID string
	// Type is matched against the state machine's transitions[].on.
	Type string
	// EntityKey is the key of the entity the event changes; empty when the event names none.
	EntityKey string
	// Amount in minor units, nil when the event carries none.
	Amount *int64
	// OccurredAt is when the event happened at the provider, nil when unknown.
	OccurredAt *time.Time
	// Payload is the raw JSON of the event (for Adyen, of the notification item), stored
	// in the receipt and forwarded in outbox payloads.
	Payload json.RawMessage
	// Headers are the request headers worth keeping: lower-cased names, first value,
	// without credentials or signatures.
	Headers map[string]string
	// Body is Payload parsed for CEL: JSON objects as map[string]any, integral numbers as
	// int64, other numbers as float64.
	Body map[string]any
}
