package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// ProviderHubSpot is the spec.provider.type of HubSpot webhooks.
const ProviderHubSpot v1alpha1.ProviderType = "HubSpot"

// hubspotScheme is HubSpot's v3 request signature: base64 HMAC-SHA256 under the app's
// client secret of the method, the request URI, the raw body and
// X-HubSpot-Request-Timestamp (Unix milliseconds), concatenated, in
// X-HubSpot-Signature-v3 (HubSpot docs, "Validating requests from HubSpot", section
// "Validate the v3 request signature"). The older X-HubSpot-Signature (v1/v2, no
// timestamp) is not accepted.
//
// The URI is {url}: spec.provider.signedURL, signed exactly as configured. HubSpot
// signs its target URL with some percent-encoded characters decoded (its docs list
// %3A %2F %3F %40 %21 %24 %27 %28 %29 %2A %2C %3B); hookkeeper does not rewrite the
// URL, so write signedURL in the form HubSpot signs: the target URL with those
// characters unencoded. The request's own URL never enters the signature, so a proxy
// that rewrites paths does not break it.
var hubspotScheme = signature.Scheme{
	HeaderSets:      []signature.HeaderSet{{Signature: "X-HubSpot-Signature-v3", Timestamp: "X-HubSpot-Request-Timestamp"}},
	Encoding:        v1alpha1.EncodingBase64,
	TimestampFormat: v1alpha1.TimestampUnixMilli,
	Template:        signature.MustTemplate("{method}{url}{body}{timestamp}"),
}

// hubspotVerifier checks HubSpot's v3 signature with the shared scheme verifier and
// splits the signed body, a JSON array of events, into one document per event.
type hubspotVerifier struct {
	scheme signature.Verifier
}

func init() {
	// The fixed scheme fills in Scheme, Hash and KeyEncoding (NeedsURL and the vector
	// tests read them); Verifier wraps the verifier derived from them, so the signature
	// check is the shared one and only the splitting is HubSpot's.
	p := fixedHMAC(v1alpha1.HMACSHA256, &hubspotScheme, Provider{
		Type: ProviderHubSpot,
		Preset: Preset{
			// HubSpot says eventId "is not guaranteed to be unique", and a retry changes
			// attemptNumber (so the body digest); the id joins the signed fields that
			// identify one event and stay the same across retries.
			ID: `string(body.portalId) + ":" + string(body.subscriptionId) + ":" + ` +
				`string(body.eventId) + ":" + string(body.occurredAt)`,
			Type: `body.subscriptionType`,
			// The object type (objectTypeId for generic "object.*" subscriptions, else
			// the subscriptionType's prefix) and its id: "deal:18436011927".
			EntityKey: `(has(body.objectTypeId) ? string(body.objectTypeId) : body.subscriptionType.split(".")[0]) + ` +
				`":" + string(body.objectId)`,
			OccurredAt: `int(body.occurredAt) / 1000`,
		},
		Batch:  true,
		Sample: hubspotSample,
		Doc: Doc{
			Signed:    "the method, `signedURL`, the body and `X-HubSpot-Request-Timestamp`, concatenated",
			Timestamp: "`X-HubSpot-Request-Timestamp` (milliseconds)",
			Key:       "the app's client secret (raw)",
		},
	})
	derived := fixedSchemeVerifier(p)
	p.Verifier = func(spec v1alpha1.ProviderSpec, secrets []signature.Secret, tolerance time.Duration) (signature.Verifier, error) {
		inner, err := derived(spec, secrets, tolerance)
		if err != nil {
			return nil, err
		}
		return verifierOf{&hubspotVerifier{scheme: inner}}, nil
	}
	register(p)
}

// Open verifies the signature, then returns each element of the body's array as one
// document, with the signed digest and timestamp of the whole request. A verified body
// that is not a non-empty array of objects is unreadable (400), not forged (401).
func (v *hubspotVerifier) Open(req signature.Request) (*signature.Verified, error) {
	verified, err := v.scheme.Open(req)
	if err != nil {
		return nil, err
	}
	docs, perr := hubspotEvents(req.Body)
	if perr != nil {
		return signature.Unreadable(req.Now, fmt.Errorf("not a HubSpot webhook batch: %w", perr), verified.Signed()), nil
	}
	return signature.NewVerified(req.Now, docs, verified.Signed()), nil
}

// hubspotEvents splits a JSON array of objects into its elements, byte for byte. It
// refuses an empty array, an element that is not an object, and data after the array.
func hubspotEvents(body []byte) ([]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil {
		return nil, errors.New("the body is not JSON")
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return nil, errors.New("the body is not a JSON array")
	}
	var docs []json.RawMessage
	for dec.More() {
		var doc json.RawMessage
		if err := dec.Decode(&doc); err != nil {
			return nil, fmt.Errorf("event %d is not valid JSON", len(docs))
		}
		if len(doc) == 0 || doc[0] != '{' {
			return nil, fmt.Errorf("event %d is not a JSON object", len(docs))
		}
		docs = append(docs, doc)
	}
	if _, err := dec.Token(); err != nil { // the closing bracket
		return nil, errors.New("the array is not closed")
	}
	if !atEnd(dec) {
		return nil, errors.New("data after the JSON array")
	}
	if len(docs) == 0 {
		return nil, errors.New("the array is empty")
	}
	return docs, nil
}

// hubspotSample is a batch of one event; the entity key is HubSpot's
// <objectTypeId>:<objectId>.
func hubspotSample(e SampleEvent) (Delivery, error) {
	objectType, objectID, ok := strings.Cut(e.EntityKey, ":")
	if !ok || objectType == "" || objectID == "" {
		return Delivery{}, fmt.Errorf("a HubSpot entity key is <objectType>:<objectId> (e.g. deal:18436011927), got %q", e.EntityKey)
	}
	return jsonDelivery([]any{map[string]any{
		"eventId": e.ID, "subscriptionId": 0, "portalId": 0, "occurredAt": e.Time.UnixMilli(),
		"subscriptionType": e.Type, "attemptNumber": 0,
		"objectTypeId": objectType, "objectId": objectID,
	}})
}
