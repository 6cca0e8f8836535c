package provider

import (
	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// Schemes that several providers share, each named after what it signs.

// bodyScheme is the scheme of a provider that signs the raw body alone (no timestamp, no
// header): one MAC, encoded as enc, in header after prefix ("" when there is none).
func bodyScheme(header, prefix string, enc v1alpha1.SignatureEncoding) *signature.Scheme {
	return &signature.Scheme{
		HeaderSets: []signature.HeaderSet{{Signature: header}},
		Prefix:     prefix,
		Encoding:   enc,
		Template:   signature.MustTemplate("{body}"),
	}
}

// stripeStyleScheme is Stripe's scheme, which Calendly follows under its own header:
// `t=<unix>,v1=<hex>` in header, the hex MAC of `{t}.{body}`.
func stripeStyleScheme(header string) *signature.Scheme {
	return &signature.Scheme{
		HeaderSets: []signature.HeaderSet{{Signature: header}},
		Composite:  &signature.Composite{PairSeparator: ",", KeyValueSeparator: "=", TimestampKey: "t", SignatureKey: "v1"},
		Encoding:   v1alpha1.EncodingHex,
		Template:   signature.MustTemplate("{timestamp}.{body}"),
	}
}

// slackStyleScheme is Slack's scheme, which Zoom follows under its own headers: the
// Unix-seconds timestamp in tsHeader and `v0=<hex>` in sigHeader, the hex MAC of
// `v0:{timestamp}:{body}`.
func slackStyleScheme(sigHeader, tsHeader string) *signature.Scheme {
	return &signature.Scheme{
		HeaderSets: []signature.HeaderSet{{Signature: sigHeader, Timestamp: tsHeader}},
		Prefix:     "v0=",
		Encoding:   v1alpha1.EncodingHex,
		Template:   signature.MustTemplate("v0:{timestamp}:{body}"),
	}
}
