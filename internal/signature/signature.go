// Package signature is the shared core of webhook signature verification: keys
// (HMAC secrets and Ed25519 public keys) decoded once, constant-time matching, header
// and timestamp parsing, and the generic Scheme that most providers are values of.
// Which provider uses which scheme lives in internal/provider, one file per provider.
// It does no I/O and keeps no clock: the caller passes the request time, so expiry and
// replay windows are testable and deterministic.
//
// Every verifier fails closed. A request verifies only when an active (unexpired) secret
// produces a MAC equal, in constant time, to one of the signatures the request carries;
// anything else — no secret, a missing or empty header, a stale timestamp — is an *Error
// whose Reason is a stable, low-cardinality metric label.
package signature

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Secret is one signing secret of an endpoint.
type Secret struct {
	// Value is the secret exactly as stored in the Kubernetes Secret (e.g. "whsec_..." for
	// Stripe and Standard Webhooks, hex for Adyen). New decodes it once.
	Value string
	// ExpiresAt is when the secret stops verifying; the zero time means never.
	ExpiresAt time.Time
}

// Request is what a verifier looks at: the headers, the raw body bytes exactly as
// received, and the time the request arrived.
type Request struct {
	Header http.Header
	Body   []byte
	// Method is the request method, for schemes that sign it ({method}).
	Method string
	// Now decides which secrets are active and whether a signed timestamp is fresh. A
	// zero Now verifies nothing, so a caller that forgets the clock cannot fail open.
	Now time.Time
}

// Verifier checks one provider's signature scheme against a fixed set of secrets. It is
// safe for concurrent use.
type Verifier interface {
	// Open verifies the request like Verify and returns what the signature vouches
	// for: the signed documents, parsed once, and the signed values around them.
	// Events must be extracted from the Verified only, never from the raw request, so
	// that what is recorded is exactly what was verified.
	Open(req Request) (*Verified, error)
	// Verify returns nil when any active (not expired at req.Now) secret verifies the
	// request, else an *Error. It never fails open: no secrets, an empty secret, a
	// missing or empty header are all errors.
	Verify(req Request) error
}

// Reason classifies a verification failure. The values are stable and few, because
// they are used as a metric label.
type Reason string

// The failure reasons.
const (
	// ReasonMissingHeader: a header the scheme needs (or, for Adyen, an item's
	// hmacSignature) is absent or empty.
	ReasonMissingHeader Reason = "missing_header"
	// ReasonMalformedHeader: the header (or the Adyen body) cannot be parsed, or carries
	// no signature of the expected version, encoding and length.
	ReasonMalformedHeader Reason = "malformed_header"
	// ReasonTimestampOutOfTolerance: the signed timestamp is further from now than the
	// provider's tolerance, in either direction.
	ReasonTimestampOutOfTolerance Reason = "timestamp_out_of_tolerance"
	// ReasonNoActiveSecret: every secret has expired (or the request carries no time).
	ReasonNoActiveSecret Reason = "no_active_secret"
	// ReasonMismatch: the request is well formed but no active secret verifies it.
	ReasonMismatch Reason = "mismatch"
)

// Error is a verification failure. Detail says what was wrong for a person reading the
// log; it never contains secret material, computed digests or header values.
type Error struct {
	Reason Reason
	Detail string
}

func (e *Error) Error() string {
	if e.Detail == "" {
		return "signature verification failed: " + string(e.Reason)
	}
	return "signature verification failed: " + string(e.Reason) + ": " + e.Detail
}

// ReasonOf returns the Reason of a verification error: "" for nil and for errors that
// did not come from a Verifier.
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// Fail returns an *Error; Detail must never hold secret material, digests or header
// values.
func Fail(reason Reason, format string, args ...any) *Error {
	return &Error{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// ErrNoSecrets is returned when a verifier is built without secrets: a verifier without
// a secret could only ever reject, which is a configuration error worth surfacing early.
var ErrNoSecrets = errors.New("no signing secrets configured")
