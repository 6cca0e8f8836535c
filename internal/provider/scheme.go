package provider

import (
	"fmt"
	"strings"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// The fixed HMAC schemes. Each function below completes p, a provider whose requests
// are one fixed HMAC scheme (as svixDelivered completes a Svix-delivered one): it sets
// p's Scheme, its Hash, a raw key (every such provider's secret is used as its
// dashboard shows it) and Doc.Scheme, which is derived from the scheme so the docs
// cannot drift from it. The families that sign the same content also fill in
// Doc.Signed and Doc.Timestamp; the presets, sample, key and source stay p's own.

// fixedHMAC completes p with scheme s under HMAC-alg. What it sets, p leaves empty.
func fixedHMAC(alg v1alpha1.HMACAlgorithm, s *signature.Scheme, p Provider) Provider {
	if p.Scheme != nil || p.Hash != nil || p.KeyEncoding != "" || p.Doc.Scheme != "" {
		panic(fmt.Sprintf("provider %s: Scheme, Hash, KeyEncoding and Doc.Scheme come from its scheme", p.Type))
	}
	p.Scheme, p.Hash, p.KeyEncoding = s, hashes[alg], v1alpha1.KeyRaw
	p.Doc.Scheme = fmt.Sprintf("HMAC-%s %s in %s", alg, strings.ToLower(string(s.Encoding)), signatureForm(s))
	return p
}

// signatureForm is how the docs show a fixed scheme's signature header: its name and,
// when the MAC is not the whole value, the value's form ("`Stripe-Signature: t=…,v1=…`",
// "`X-PagerDuty-Signature: v1=…[,v1=…]`").
func signatureForm(s *signature.Scheme) string {
	header := s.HeaderSets[0].Signature
	switch {
	case s.Composite != nil:
		c := s.Composite
		return fmt.Sprintf("`%s: %s%s…%s%s%s…`", header, c.TimestampKey, c.KeyValueSeparator, c.PairSeparator, c.SignatureKey, c.KeyValueSeparator)
	case s.Separator != "":
		return fmt.Sprintf("`%s: %s…[%s%s…]`", header, s.Prefix, s.Separator, s.Prefix)
	case s.Prefix != "":
		return fmt.Sprintf("`%s: %s…`", header, s.Prefix)
	}
	return "`" + header + "`"
}

// signedDoc sets the docs of what p's scheme family signs, which p leaves empty.
func signedDoc(p Provider, signed, timestamp string) Provider {
	if p.Doc.Signed != "" || p.Doc.Timestamp != "" {
		panic(fmt.Sprintf("provider %s: Doc.Signed and Doc.Timestamp come from its scheme", p.Type))
	}
	p.Doc.Signed, p.Doc.Timestamp = signed, timestamp
	return p
}

// bodyHMAC completes p, a provider that signs the raw body alone (no timestamp, no
// header) with HMAC-alg and sends one MAC, encoded as enc, in header after prefix (""
// when there is none).
func bodyHMAC(alg v1alpha1.HMACAlgorithm, header, prefix string, enc v1alpha1.SignatureEncoding, p Provider) Provider {
	return signedDoc(fixedHMAC(alg, bodyScheme(header, prefix, enc), p), "the body", "")
}

// bodyScheme is the scheme of a provider that signs the raw body alone: one MAC, encoded
// as enc, in header after prefix ("" when there is none).
func bodyScheme(header, prefix string, enc v1alpha1.SignatureEncoding) *signature.Scheme {
	return &signature.Scheme{
		HeaderSets: []signature.HeaderSet{{Signature: header}},
		Prefix:     prefix,
		Encoding:   enc,
		Template:   signature.MustTemplate("{body}"),
	}
}

// stripeStyle completes p, a provider that signs as Stripe does (Calendly does so under
// its own header): `t=<unix>,v1=<hex>` in header, the hex HMAC-SHA256 of `{t}.{body}`.
func stripeStyle(header string, p Provider) Provider {
	p = fixedHMAC(v1alpha1.HMACSHA256, &signature.Scheme{
		HeaderSets: []signature.HeaderSet{{Signature: header}},
		Composite:  &signature.Composite{PairSeparator: ",", KeyValueSeparator: "=", TimestampKey: "t", SignatureKey: "v1"},
		Encoding:   v1alpha1.EncodingHex,
		Template:   signature.MustTemplate("{timestamp}.{body}"),
	}, p)
	return signedDoc(p, "`t`, `.` and the body", "`t`")
}

// slackStyle completes p, a provider that signs as Slack does (Zoom does so under its
// own headers): the Unix-seconds timestamp in tsHeader and `v0=<hex>` in sigHeader, the
// hex HMAC-SHA256 of `v0:{timestamp}:{body}`.
func slackStyle(sigHeader, tsHeader string, p Provider) Provider {
	p = fixedHMAC(v1alpha1.HMACSHA256, &signature.Scheme{
		HeaderSets: []signature.HeaderSet{{Signature: sigHeader, Timestamp: tsHeader}},
		Prefix:     "v0=",
		Encoding:   v1alpha1.EncodingHex,
		Template:   signature.MustTemplate("v0:{timestamp}:{body}"),
	}, p)
	return signedDoc(p, "`v0:`, `"+tsHeader+"` and the body", "`"+tsHeader+"`")
}
