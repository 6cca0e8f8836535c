package outbox

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// Envelope is the JSON body of every delivery. ID is the row's dedupe key, stable
// across attempts, and equals the Idempotency-Key and webhook-id headers.
type Envelope struct {
	ID            string          `json:"id"`
	Type          string          `json:"type"`
	Endpoint      string          `json:"endpoint"`
	EntityKey     string          `json:"entityKey"`
	SourceEventID string          `json:"sourceEventId"`
	OccurredAt    *time.Time      `json:"occurredAt,omitempty"`
	CreatedAt     time.Time       `json:"createdAt"`
	Data          json.RawMessage `json:"data"`
}

// Headers of a delivery.
const (
	HeaderIdempotencyKey   = "Idempotency-Key"
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
)

// maxDrain is how much of a response body is read so the connection can be reused.
const maxDrain = 64 << 10

// maxErrorLen caps last_error.
const maxErrorLen = 200

// attempt is the outcome of one POST, before backoff is applied.
type attempt struct {
	// sent is false when the request never left (it could not be built).
	sent   bool
	status int
	// retryAfter is the sink's Retry-After, zero when absent.
	retryAfter time.Duration
	err        error
}

func (d *Dispatcher) newHTTPClient() *http.Client {
	if d.opts.HTTPClient != nil {
		// A caller's client is used as given but for redirects, which it may follow.
		c := *d.opts.HTTPClient
		c.CheckRedirect = refuseRedirect
		return &c
	}
	transport := &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   5 * time.Second,
			KeepAlive: 30 * time.Second,
			// Whatever name resolved to it, an instance-metadata address is never dialled.
			Control: refuseMetadataAddress,
		}).DialContext,
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        d.opts.Concurrency,
		MaxIdleConnsPerHost: d.opts.Concurrency,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 5 * time.Second,
	}
	return &http.Client{
		Transport:     transport,
		CheckRedirect: refuseRedirect,
	}
}

// refuseRedirect is every dispatcher client's CheckRedirect: a redirect would re-send a
// signed event somewhere the spec does not name, so a 3xx is a failed attempt.
func refuseRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// errMetadataAddress: the sink's name resolved to an instance-metadata address.
var errMetadataAddress = errors.New("the sink resolves to a cloud instance-metadata address, which is never dialled")

// refuseMetadataAddress is the dialer's Control: it runs before each connect, with the
// address the name resolved to.
func refuseMetadataAddress(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err == nil && config.IsMetadataAddress(ap.Addr()) {
		return errMetadataAddress
	}
	return nil
}

// envelope renders the delivery body of r.
func (d *Dispatcher) envelope(r row) ([]byte, error) {
	data := r.Payload
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	var occurred *time.Time
	if r.OccurredAt != nil {
		t := r.OccurredAt.UTC()
		occurred = &t
	}
	body, err := json.Marshal(Envelope{
		ID:            r.DedupeKey,
		Type:          r.EventType,
		Endpoint:      d.opts.Endpoint,
		EntityKey:     r.EntityKey,
		SourceEventID: r.SourceEventID,
		OccurredAt:    occurred,
		CreatedAt:     r.CreatedAt.UTC(),
		Data:          data,
	})
	if err != nil {
		return nil, fmt.Errorf("render envelope of outbox row %d: %w", r.ID, err)
	}
	return body, nil
}

// post sends r once to the sink within the attempt timeout.
func (d *Dispatcher) post(ctx context.Context, r row) attempt {
	body, err := d.envelope(r)
	if err != nil {
		return attempt{err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, d.opts.Timeout)
	defer cancel()
	// The sink URL comes from the WebhookEndpoint spec (the platform team's), never from a
	// webhook request.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.opts.SinkURL, bytes.NewReader(body)) //nolint:gosec // G704: see above

	if err != nil {
		return attempt{err: errors.New("build request for the sink URL")}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "hookkeeper-dispatcher")
	req.Header.Set(HeaderIdempotencyKey, r.DedupeKey)
	if d.signingKey != nil {
		ts := d.opts.Clock()
		// Set directly: Standard Webhooks names its headers in lower case.
		req.Header[HeaderWebhookID] = []string{r.DedupeKey}
		req.Header[HeaderWebhookTimestamp] = []string{strconv.FormatInt(ts.Unix(), 10)}
		req.Header[HeaderWebhookSignature] = []string{signature.SignStandardWebhooks(d.signingKey, r.DedupeKey, ts, body)}
	}
	resp, err := d.client.Do(req) //nolint:gosec // G704: the sink URL is configuration

	if err != nil {
		return attempt{sent: true, err: err}
	}
	// The drain ends with the attempt: the body of a 101 is the raw connection, which
	// the request's context no longer governs, and a sink that answers 101 and then
	// stays silent would hold the worker past the fence, and Run past its shutdown.
	stopClose := context.AfterFunc(ctx, func() { _ = resp.Body.Close() })
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	stopClose()
	_ = resp.Body.Close()
	return attempt{sent: true, status: resp.StatusCode, retryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), d.opts.Clock())}
}

// describe turns a failed attempt into last_error: the status or the kind of transport
// error, never the URL (it may carry credentials), the sink's host or address, or the
// body. last_error is read by people and exported by tools; what failed is enough there.
func (d *Dispatcher) describe(a attempt) string {
	if a.err == nil {
		return "sink answered " + strconv.Itoa(a.status)
	}
	err := a.err
	if errors.Is(err, context.DeadlineExceeded) {
		return "no answer within " + d.opts.Timeout.String()
	}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	var msg string
	var dnsErr *net.DNSError
	var opErr *net.OpError
	switch {
	case certificateProblem(err) != "":
		msg = "the sink's TLS certificate " + certificateProblem(err)
	case errors.As(err, &dnsErr):
		// "lookup <host> on <server>: no such host"
		msg = "lookup of the sink's host: " + dnsErr.Err
	case errors.As(err, &opErr) && opErr.Err != nil:
		// "dial tcp 10.0.0.7:80: connect: connection refused": keep the operation and
		// the cause, drop the addresses.
		msg = strings.TrimSpace(opErr.Op+" "+opErr.Net) + ": " + opErr.Err.Error()
	default:
		msg = err.Error()
	}
	return truncateText(redactSink(msg, d.opts.SinkURL), maxErrorLen)
}

// certificateProblem says what is wrong with a sink's TLS certificate, in words that
// repeat nothing of it: x509's own messages list the names the certificate is valid
// for, which are the sink's other host names. Empty when err is no certificate error.
func certificateProblem(err error) string {
	var hostErr x509.HostnameError
	var authorityErr x509.UnknownAuthorityError
	var invalidErr x509.CertificateInvalidError
	switch {
	case errors.As(err, &hostErr):
		return "is not valid for the sink's host name"
	case errors.As(err, &authorityErr):
		return "is signed by an unknown authority"
	case errors.As(err, &invalidErr) && invalidErr.Reason == x509.Expired:
		return "has expired or is not yet valid"
	case errors.As(err, &invalidErr):
		return "is not valid for a TLS server"
	}
	var verifyErr *tls.CertificateVerificationError
	if errors.As(err, &verifyErr) {
		return "did not verify"
	}
	return ""
}

// truncateText makes msg storable in a text column and at most n bytes long. An error
// can quote what a sink sent (a TLS certificate's names, for one), which may be any
// UTF-8 or not UTF-8 at all: PostgreSQL refuses invalid UTF-8 and NUL in text, and a
// refused last_error would fail the statement that records the whole batch, again on
// every attempt. Invalid bytes and NULs become U+FFFD, and the cut falls between
// characters.
func truncateText(msg string, n int) string {
	msg = strings.ReplaceAll(strings.ToValidUTF8(msg, "\uFFFD"), "\x00", "\uFFFD")
	if len(msg) <= n {
		return msg
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut]
}

// redactSink replaces whatever of the sink URL an error message repeats (the URL, its
// host and port, its host name, as a TLS certificate mismatch names it) with "<sink>".
func redactSink(msg, sinkURL string) string {
	u, err := url.Parse(sinkURL)
	if err != nil {
		return msg
	}
	for _, s := range []string{sinkURL, u.Redacted(), u.Host, u.Hostname()} {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "<sink>")
		}
	}
	return msg
}

// maxRetryAfter caps the wait a sink's Retry-After can ask for.
const maxRetryAfter = 24 * time.Hour

// parseRetryAfter reads delay-seconds or an HTTP date, capped at maxRetryAfter; zero
// when absent or invalid.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	// delay-seconds is any run of digits: one too large for an int64 is a very long
	// delay (ParseInt returns the largest int64 with ErrRange), not an invalid one.
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		if secs <= 0 {
			return 0
		}
		return time.Duration(min(secs, int64(maxRetryAfter/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), maxRetryAfter)
	}
	return 0
}

// backoff is the full-jitter delay after failed attempt n (1-based): uniform in
// [0, min(max, initial*2^(n-1))], and at least the sink's Retry-After, which may exceed
// max: the sink said when it can take the row again (up to maxRetryAfter).
func (d *Dispatcher) backoff(n int, retryAfter time.Duration) time.Duration {
	ceiling := d.opts.BackoffMax
	if n-1 < 62 {
		if step := d.opts.BackoffInitial << (n - 1); step > 0 && step < ceiling && step>>(n-1) == d.opts.BackoffInitial {
			ceiling = step
		}
	}
	delay := time.Duration(d.opts.Random() * float64(ceiling))
	return max(delay, retryAfter)
}
