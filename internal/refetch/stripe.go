package refetch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/expr"
)

// StripeAPI is Stripe's public API, the default base URL.
const StripeAPI = "https://api.stripe.com"

// maxObjectBytes caps a fetched object. Stripe objects are a few KiB; the cap only
// stops a misbehaving server from filling the receiver's memory.
const maxObjectBytes = 2 << 20

// stripeCollections maps a Stripe object type (data.object.object) to the API path of
// its collection; the object is GET {collection}/{id}.
var stripeCollections = map[string]string{
	"payment_intent":        "/v1/payment_intents",
	"charge":                "/v1/charges",
	"refund":                "/v1/refunds",
	"dispute":               "/v1/disputes",
	"checkout.session":      "/v1/checkout/sessions",
	"invoice":               "/v1/invoices",
	"invoiceitem":           "/v1/invoiceitems",
	"credit_note":           "/v1/credit_notes",
	"subscription":          "/v1/subscriptions",
	"subscription_schedule": "/v1/subscription_schedules",
	"setup_intent":          "/v1/setup_intents",
	"payment_method":        "/v1/payment_methods",
	"mandate":               "/v1/mandates",
	"customer":              "/v1/customers",
	"payout":                "/v1/payouts",
	"transfer":              "/v1/transfers",
	"quote":                 "/v1/quotes",
	"payment_link":          "/v1/payment_links",
	"review":                "/v1/reviews",
}

// StripeObjectTypes lists the object types Stripe can re-fetch.
func StripeObjectTypes() []string {
	out := make([]string, 0, len(stripeCollections))
	for t := range stripeCollections {
		out = append(out, t)
	}
	return out
}

// stripeID is the shape of Stripe ids (pi_3MtwBw..., cs_test_a1...); anything else is
// refused before it reaches a URL.
var stripeID = regexp.MustCompile(`^[A-Za-z0-9_]{1,255}$`)

// StripeOptions configure a Stripe fetcher.
type StripeOptions struct {
	// APIKey is a secret or restricted key with read access to the fetched objects.
	APIKey string
	// BaseURL of the API; StripeAPI when empty. It must be https: the API key is sent to
	// it.
	BaseURL string
	// AllowInsecureHTTP permits an http BaseURL, for a local stand-in of the API in tests
	// (spec.provider.refetch.allowInsecureHTTP).
	AllowInsecureHTTP bool
	// APIVersion is sent as Stripe-Version when set; otherwise the account's default
	// API version shapes the object.
	APIVersion string
	// Timeout of one call; v1alpha1.DefaultRefetchTimeout when zero.
	Timeout time.Duration
	// CacheTTL is how long a fetched object answers later events about the same object
	// (see cache.go); DefaultCacheTTL when zero, no cache when negative.
	CacheTTL time.Duration
	// Client sends the requests; a client of its own when nil.
	Client *http.Client
	Logger logr.Logger
}

// Stripe fetches objects from Stripe's API. It is safe for concurrent use.
type Stripe struct {
	base       *url.URL
	apiKey     string
	apiVersion string
	timeout    time.Duration
	client     *http.Client
	cache      *cache
	log        logr.Logger
}

// NewStripe checks opts and returns a fetcher. Errors never contain the key.
func NewStripe(opts StripeOptions) (*Stripe, error) {
	if opts.APIKey == "" {
		return nil, errors.New("refetch: the Stripe API key is empty")
	}
	if strings.ContainsAny(opts.APIKey, " \t\r\n") {
		return nil, errors.New("refetch: the Stripe API key contains whitespace")
	}
	base, err := parseBaseURL(opts.BaseURL, opts.AllowInsecureHTTP)
	if err != nil {
		return nil, err
	}
	if opts.Timeout <= 0 {
		opts.Timeout = v1alpha1.DefaultRefetchTimeout
	}
	if opts.CacheTTL == 0 {
		opts.CacheTTL = DefaultCacheTTL
	}
	if opts.Client == nil {
		opts.Client = &http.Client{
			Transport: &http.Transport{
				Proxy:               http.ProxyFromEnvironment,
				ForceAttemptHTTP2:   true,
				MaxIdleConnsPerHost: 16,
				IdleConnTimeout:     90 * time.Second,
				TLSHandshakeTimeout: 10 * time.Second,
			},
			// A redirect would carry the key's request somewhere the spec does not name
			// (or to plain http): a 3xx is a failed call, not a hop to follow.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return &Stripe{
		base:       base,
		apiKey:     opts.APIKey,
		apiVersion: opts.APIVersion,
		timeout:    opts.Timeout,
		client:     opts.Client,
		cache:      newCache(opts.CacheTTL, time.Now),
		log:        opts.Logger,
	}, nil
}

func parseBaseURL(raw string, allowHTTP bool) (*url.URL, error) {
	if raw == "" {
		raw = StripeAPI
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("refetch: parse base URL: %w", err)
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && allowHTTP:
	case u.Scheme == "http":
		// The API key would cross the network in clear text.
		return nil, fmt.Errorf("refetch: base URL %q: must be https, it receives the API key (spec.provider.refetch.allowInsecureHTTP permits http for a local stand-in)", u.Redacted())
	default:
		return nil, fmt.Errorf("refetch: base URL %q: scheme must be https", u.Redacted())
	}
	if u.Host == "" {
		return nil, fmt.Errorf("refetch: base URL %q has no host", u.Redacted())
	}
	// Credentials belong in the Secret, not in a URL that ends up in logs.
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("refetch: base URL %q must not carry credentials, a query or a fragment", u.Redacted())
	}
	u.Path = strings.TrimRight(u.Path, "/")
	return u, nil
}

// stripeRef is the object an event names.
type stripeRef struct {
	objectType, id string
	// account is the connected account (Stripe Connect) the event came from, sent as
	// Stripe-Account so the object is read where it lives.
	account string
	// claimed is the status the event's copy of the object states, the cache's check.
	claimed string
}

func (r stripeRef) key() string { return r.account + "/" + r.objectType + "/" + r.id }

// stripeRefOf reads data.object.object and data.object.id of a Stripe event.
func stripeRefOf(ev Event) (stripeRef, error) {
	obj, _ := dig(ev.Body, "data", "object").(map[string]any)
	if obj == nil {
		return stripeRef{}, newError(unsupported, "refetch: event %s (%s) has no data.object", ev.ID, ev.Type)
	}
	objectType, _ := obj["object"].(string)
	if _, ok := stripeCollections[objectType]; !ok {
		return stripeRef{}, newError(unsupported, "refetch: event %s (%s) names object type %q, which refetch cannot fetch", ev.ID, ev.Type, objectType)
	}
	id, _ := obj["id"].(string)
	if !stripeID.MatchString(id) {
		return stripeRef{}, newError(unsupported, "refetch: event %s (%s) has no valid data.object.id", ev.ID, ev.Type)
	}
	ref := stripeRef{objectType: objectType, id: id}
	if acct, ok := ev.Body["account"].(string); ok && acct != "" {
		if !stripeID.MatchString(acct) {
			return stripeRef{}, newError(unsupported, "refetch: event %s (%s) has an invalid account", ev.ID, ev.Type)
		}
		ref.account = acct
	}
	ref.claimed, _ = obj["status"].(string)
	return ref, nil
}

func dig(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

// Fetch returns the current state of the object ev names (data.object).
func (s *Stripe) Fetch(ctx context.Context, ev Event) (Live, error) {
	ref, err := stripeRefOf(ev)
	if err != nil {
		return Live{}, err
	}
	return s.cache.get(ctx, ref.key(), ref.claimed, func(ctx context.Context) (Live, error) {
		return s.get(ctx, ref)
	})
}

// get performs one GET with the per-call timeout.
func (s *Stripe) get(ctx context.Context, ref stripeRef) (Live, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	u := *s.base
	u.Path = u.Path + stripeCollections[ref.objectType] + "/" + ref.id
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return Live{}, newError(unavailable, "refetch: build request for %s %s: %v", ref.objectType, ref.id, err)
	}
	req.Header.Set("Authorization", "Bearer "+s.apiKey)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "hookkeeper-refetch")
	if s.apiVersion != "" {
		req.Header.Set("Stripe-Version", s.apiVersion)
	}
	if ref.account != "" {
		req.Header.Set("Stripe-Account", ref.account)
	}

	resp, err := s.client.Do(req)
	if err != nil {
		if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return Live{}, newError(unavailable, "refetch: %s %s: no answer within %s", ref.objectType, ref.id, s.timeout)
		}
		// *url.Error names the URL (base, path, id) and the cause; the key lives only
		// in a header, which it never prints.
		return Live{}, newError(unavailable, "refetch: %s %s: %v", ref.objectType, ref.id, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxObjectBytes+1))
	if err != nil {
		return Live{}, newError(unavailable, "refetch: %s %s: read answer: %v", ref.objectType, ref.id, err)
	}
	requestID := resp.Header.Get("Request-Id")

	switch code := resp.StatusCode; {
	case code == http.StatusOK:
	case code == http.StatusNotFound:
		return Live{}, newError(notFound, "refetch: object %s not found", ref.id)
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		// Stripe's message for a bad key quotes part of it: neither it nor the key is
		// logged, only what a person needs to find the request.
		s.log.Error(ErrUnauthorized, "Stripe rejected the refetch API key; check spec.provider.refetch.apiKeySecretRef (a key with read access to this object type)",
			"status", code, "objectType", ref.objectType, "objectID", ref.id, "requestID", requestID)
		return Live{}, newError(unauthorized, "refetch: %s %s: Stripe answered %d: the API key was rejected", ref.objectType, ref.id, code)
	case code == http.StatusTooManyRequests || code >= 500:
		return Live{}, newError(unavailable, "refetch: %s %s: Stripe answered %d", ref.objectType, ref.id, code)
	default:
		// 400 and the like mean the request itself is wrong (e.g. an unknown
		// Stripe-Version): fail closed, and say so loudly.
		kind := stripeErrorKind(body)
		s.log.Error(ErrUnavailable, "Stripe refused the refetch request", "status", code, "error", kind,
			"objectType", ref.objectType, "objectID", ref.id, "requestID", requestID)
		return Live{}, newError(unavailable, "refetch: %s %s: Stripe answered %d (%s)", ref.objectType, ref.id, code, kind)
	}

	if len(body) > maxObjectBytes {
		return Live{}, newError(unavailable, "refetch: %s %s: the answer exceeds %d bytes", ref.objectType, ref.id, maxObjectBytes)
	}
	parsed, err := expr.DecodeJSON(body)
	if err != nil {
		return Live{}, newError(unavailable, "refetch: %s %s: %v", ref.objectType, ref.id, err)
	}
	obj, ok := parsed.(map[string]any)
	if !ok {
		return Live{}, newError(unavailable, "refetch: %s %s: the answer is not a JSON object", ref.objectType, ref.id)
	}
	if got, _ := obj["id"].(string); got != ref.id {
		return Live{}, newError(unavailable, "refetch: %s %s: the answer is object %q", ref.objectType, ref.id, got)
	}
	status, _ := obj["status"].(string)
	return Live{Object: obj, ObjectType: ref.objectType, ObjectID: ref.id, Status: status}, nil
}

// stripeErrorKind is "type/code" of a Stripe error body; the message is left out, as it
// may quote request values.
func stripeErrorKind(body []byte) string {
	var e struct {
		Error struct {
			Type string `json:"type"`
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || e.Error.Type == "" {
		return "no Stripe error body"
	}
	if e.Error.Code == "" {
		return e.Error.Type
	}
	return e.Error.Type + "/" + e.Error.Code
}
