package signature

import (
	"strings"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// HeaderStripeSignature carries Stripe's timestamp and signatures.
const HeaderStripeSignature = "Stripe-Signature"

// stripeVerifier implements Stripe's scheme: `Stripe-Signature: t=<unix>,v1=<hex>,...`
// over "{t}.{body}", keyed with the whole secret string (whsec_ prefix included).
type stripeVerifier struct {
	core      *hmacCore
	tolerance time.Duration
}

// stripeHeader is a parsed Stripe-Signature value.
type stripeHeader struct {
	timestamp  string   // the literal text after t=, which is what Stripe signed
	signatures [][]byte // decoded v1 signatures of the right length
}

// parseStripeHeader parses comma-separated key=value pairs. Exactly one t is required;
// v1 values that do not decode are skipped (Stripe may add schemes, and a roll lists one
// v1 per secret); keys other than t and v1 are ignored.
func parseStripeHeader(value string, macSize int) (stripeHeader, *Error) {
	var (
		h     stripeHeader
		hasTS bool
	)
	for _, pair := range strings.Split(value, ",") {
		key, val, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok {
			return stripeHeader{}, fail(ReasonMalformedHeader, "%s has an element that is not key=value", HeaderStripeSignature)
		}
		switch key {
		case "t":
			if hasTS {
				return stripeHeader{}, fail(ReasonMalformedHeader, "%s has more than one timestamp", HeaderStripeSignature)
			}
			hasTS = true
			h.timestamp = val
		case "v1":
			if sig, ok := decodeSignature(v1alpha1.EncodingHex, val, macSize); ok {
				h.signatures = append(h.signatures, sig)
			}
		}
	}
	if !hasTS {
		return stripeHeader{}, fail(ReasonMalformedHeader, "%s has no timestamp", HeaderStripeSignature)
	}
	if len(h.signatures) == 0 {
		return stripeHeader{}, fail(ReasonMalformedHeader, "%s has no v1 signature", HeaderStripeSignature)
	}
	return h, nil
}

func (v *stripeVerifier) Verify(req Request) error {
	_, err := v.Open(req)
	return err
}

func (v *stripeVerifier) Open(req Request) (*Verified, error) {
	keys, ferr := v.core.active(req.Now)
	if ferr != nil {
		return nil, ferr
	}
	value, ferr := singleHeader(req.Header, HeaderStripeSignature)
	if ferr != nil {
		return nil, ferr
	}
	h, ferr := parseStripeHeader(value, v.core.macSize())
	if ferr != nil {
		return nil, ferr
	}
	if ferr := checkTimestamp(HeaderStripeSignature+" t", h.timestamp, req.Now, v.tolerance); ferr != nil {
		return nil, ferr
	}
	if !v.core.match(keys, h.signatures, []byte(h.timestamp), []byte("."), req.Body) {
		return nil, fail(ReasonMismatch, "no active secret produces a v1 signature in %s", HeaderStripeSignature)
	}
	return wholeBody(req, map[string]string{SignedTimestamp: h.timestamp}), nil
}
