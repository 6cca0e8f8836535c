package provider

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// Signing and samples: what `hookkeeper send-test` sends. Each provider's file holds its
// sample (next to its presets) and, when its verifier is its own code, its signer; the
// providers that are one HMAC Scheme are signed by the scheme (fixedSchemeSigner).

// Delivery is one request as a provider sends it.
type Delivery struct {
	// Method is the request method; empty is POST.
	Method string
	// Header holds the headers the provider sends besides the signature (the ones the
	// presets read, such as X-GitHub-Event); Sign adds the signature's.
	Header http.Header
	Body   []byte
	// ID is the delivery id the scheme signs where it signs one (webhook-id,
	// Twitch-Eventsub-Message-Id, Mailgun's token); Sign makes one up when it is empty.
	ID string
	// Time is when it is signed; Sign uses now when it is zero.
	Time time.Time
}

// SampleEvent is what a sample event carries.
type SampleEvent struct {
	// ID is unique to the event: its id where the provider's events have one, else a
	// field of the body, so the digest the id preset reads is unique too.
	ID        string
	Type      string
	EntityKey string
	Time      time.Time
}

// ErrCannotSign is returned by Sign for a provider whose Secret cannot sign.
var ErrCannotSign = errors.New("cannot sign")

// Sign signs d as the provider of spec does, with secret exactly as the endpoint's
// Secret stores it. The result is d with the signature's headers added (and, for
// Mailgun, whose signature lives in the body, the body's signature object replaced).
// Errors never contain the secret.
func Sign(spec v1alpha1.ProviderSpec, secret string, d Delivery) (Delivery, error) {
	if err := errors.Join(Validate(spec)...); err != nil {
		return Delivery{}, err
	}
	p, _ := Lookup(spec.Type)
	if p.Sign == nil {
		return Delivery{}, fmt.Errorf("%w: %s", ErrCannotSign, p.CannotSign)
	}
	if d.Method == "" {
		d.Method = http.MethodPost
	}
	if d.Time.IsZero() {
		d.Time = time.Now()
	}
	d.Header = d.Header.Clone()
	if d.Header == nil {
		d.Header = http.Header{}
	}
	return p.Sign(spec, secret, d)
}

// Sample returns the sample event of spec's provider.
func Sample(spec v1alpha1.ProviderSpec, e SampleEvent) (Delivery, error) {
	p, ok := Lookup(spec.Type)
	if !ok {
		return Delivery{}, fmt.Errorf("unknown provider %q", spec.Type)
	}
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	d, err := p.Sample(e)
	if err != nil {
		return Delivery{}, fmt.Errorf("%s sample: %w", spec.Type, err)
	}
	if d.Time.IsZero() {
		d.Time = e.Time
	}
	if d.Header == nil {
		d.Header = http.Header{}
	}
	if d.Header.Get("Content-Type") == "" {
		d.Header.Set("Content-Type", "application/json")
	}
	return d, nil
}

// fixedSchemeSigner is the Sign of a provider that is one fixed HMAC Scheme.
func fixedSchemeSigner(p Provider) func(v1alpha1.ProviderSpec, string, Delivery) (Delivery, error) {
	scheme := *p.Scheme
	return func(spec v1alpha1.ProviderSpec, secret string, d Delivery) (Delivery, error) {
		s := scheme
		s.URL = spec.SignedURL
		return signWithScheme(s, p.Hash, p.KeyEncoding, secret, d)
	}
}

// signWithScheme signs d with an HMAC scheme and adds its headers.
func signWithScheme(s signature.Scheme, newHash func() hash.Hash, encoding v1alpha1.KeyEncoding, secret string, d Delivery) (Delivery, error) {
	key, err := signature.NewHMACSigningKey(newHash, encoding, secret)
	if err != nil {
		return Delivery{}, fmt.Errorf("signing secret: %w", err)
	}
	if s.Template.Uses(signature.PlaceholderID) && d.ID == "" {
		d.ID = "msg_" + randomHex(12)
	}
	h, err := s.Sign(key, signature.Message{Body: d.Body, Method: d.Method, Time: d.Time, ID: d.ID})
	if err != nil {
		return Delivery{}, err
	}
	for name, values := range h {
		d.Header[name] = values
	}
	return d, nil
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// sampleJSON encodes a sample body without HTML escaping, as providers send it.
func sampleJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// jsonDelivery is a sample delivery of one JSON body, with headers given as name,
// value pairs (the ones the presets read).
func jsonDelivery(body any, header ...string) (Delivery, error) {
	b, err := sampleJSON(body)
	if err != nil {
		return Delivery{}, err
	}
	h := http.Header{}
	for i := 0; i+1 < len(header); i += 2 {
		h.Set(header[i], header[i+1])
	}
	return Delivery{Body: b, Header: h}, nil
}

// signedIDDelivery is jsonDelivery for a provider whose scheme signs a delivery id
// (svix-id, webhook-id, Twitch's message id, Mailgun's token): the sample carries id for
// Sign to put where the scheme reads it.
func signedIDDelivery(id string, body any, header ...string) (Delivery, error) {
	d, err := jsonDelivery(body, header...)
	if err != nil {
		return Delivery{}, err
	}
	d.ID = id
	return d, nil
}

// repositorySample is the sample of a git host (GitHub, Bitbucket) that names the event
// type in eventHeader and the delivery in deliveryHeader: an event on the repository
// named by the entity key. Its id preset is the body's digest, made unique by a test id
// member.
func repositorySample(eventHeader, deliveryHeader string) func(SampleEvent) (Delivery, error) {
	return func(e SampleEvent) (Delivery, error) {
		return jsonDelivery(map[string]any{
			"repository": map[string]any{"full_name": e.EntityKey},
			testIDField:  e.ID,
		}, eventHeader, e.Type, deliveryHeader, e.ID)
	}
}

// rfc3339 writes t as the providers' JSON bodies do, in UTC with milliseconds.
func rfc3339(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// testIDField is the body member that makes a sample unique for a provider whose id
// preset is a digest of what it signs (its events carry no id of their own).
const testIDField = "hookkeeper_test_id"
