package provider

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v85/webhook"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

func TestStripeHeaderForms(t *testing.T) {
	v := vectorNamed(t, "stripe-computed")
	header := v.Headers["Stripe-Signature"]
	ts, rest, _ := strings.Cut(header, ",")
	sigA, sigB, _ := strings.Cut(rest, ",")
	verifier := mustNew(t, v.spec(), signature.Secret{Value: v.Secret})

	expectHeaderValues(t, verifier, v, "Stripe-Signature", []headerCase{
		{"as sent", header, ""},
		{"only the primary v1", ts + "," + sigA, ""},
		{"v1 first, t last", sigA + "," + ts, ""},
		{"unknown schemes are ignored", ts + ",v0=abc," + sigA + ",foo=bar", ""},
		{"an undecodable v1 next to a good one", ts + ",v1=bad_signature," + sigA, ""},
		{"upper-case hex", ts + ",v1=" + strings.ToUpper(strings.TrimPrefix(sigA, "v1=")), ""},
		{"spaces after commas", ts + ", " + sigA, ""},
		{"only the previous secret's v1", ts + "," + sigB, signature.ReasonMismatch},
		{"v0 scheme only", ts + ",v0=" + strings.TrimPrefix(sigA, "v1="), signature.ReasonMalformedHeader},
		{"no timestamp", sigA, signature.ReasonMalformedHeader},
		{"two timestamps", ts + "," + ts + "," + sigA, signature.ReasonMalformedHeader},
		{"element without =", ts + ",v1," + sigA, signature.ReasonMalformedHeader},
		{"order-swapped legacy form", "v1,t=1", signature.ReasonMalformedHeader},
		{"t= only", "t=", signature.ReasonMalformedHeader},
		{"truncated v1", ts + "," + sigA[:len(sigA)-2], signature.ReasonMalformedHeader},
	})

	t.Run("roll on Stripe's side: the header's second v1 verifies the previous secret", func(t *testing.T) {
		prev := mustNew(t, v.spec(), signature.Secret{Value: v.PreviousSecret})
		expectReason(t, prev.Verify(v.request()), "", v)
	})
	t.Run("the key is the whole whsec_ string, not its base64 payload", func(t *testing.T) {
		stripped := mustNew(t, v.spec(), signature.Secret{Value: strings.TrimPrefix(v.Secret, "whsec_")})
		expectReason(t, stripped.Verify(v.request()), signature.ReasonMismatch, v)
	})
}

// Stripe publishes no fixed vector, so its official SDK signs here: a request signed by
// stripe-go's webhook package verifies, and so does the computed vector in
// testdata/vectors.json under stripe-go's own check; a changed body fails both.
func TestStripeAgreesWithStripeGo(t *testing.T) {
	const secret = "whsec_hookkeeper_stripe_go_agreement"
	now := time.Unix(1767225600, 0)
	body := []byte(`{"id":"evt_sdk","object":"event","type":"payment_intent.succeeded","data":{"object":{"id":"pi_sdk","amount":4200}}}`)
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: now})
	verifier, err := NewVerifier(v1alpha1.ProviderSpec{Type: v1alpha1.ProviderStripe}, []signature.Secret{{Value: secret}})
	if err != nil {
		t.Fatal(err)
	}
	req := signature.Request{Header: http.Header{"Stripe-Signature": {signed.Header}}, Body: body, Method: http.MethodPost, Now: now}
	if _, err := verifier.Open(req); err != nil {
		t.Fatalf("a stripe-go signature does not verify: %v", err)
	}
	req.Body = append([]byte(nil), body...)
	req.Body[len(req.Body)-2] = '1'
	if signature.ReasonOf(verifier.Verify(req)) != signature.ReasonMismatch {
		t.Fatal("a changed body verified")
	}

	v := vectorNamed(t, "stripe-computed")
	if err := webhook.ValidatePayloadIgnoringTolerance([]byte(v.Body), v.Headers["Stripe-Signature"], v.Secret); err != nil {
		t.Fatalf("stripe-go refuses the computed vector: %v", err)
	}
	if err := webhook.ValidatePayloadIgnoringTolerance([]byte(v.Body+" "), v.Headers["Stripe-Signature"], v.Secret); err == nil {
		t.Fatal("stripe-go accepts the vector with a changed body: the check is vacuous")
	}
}

func TestStandardWebhooksHelpers(t *testing.T) {
	v := vectorNamed(t, "standardwebhooks-reference")
	key, err := signature.DecodeWhsec(v.Secret)
	if err != nil {
		t.Fatal(err)
	}
	bare, err := signature.DecodeWhsec(strings.TrimPrefix(v.Secret, "whsec_"))
	if err != nil || string(bare) != string(key) {
		t.Fatalf("the whsec_ prefix is optional: %v", err)
	}
	got := signature.SignStandardWebhooks(key, v.Headers[HeaderWebhookID], time.Unix(1614265330, 0), []byte(v.Body))
	if got != v.Headers[HeaderWebhookSignature] {
		t.Fatalf("signature.SignStandardWebhooks does not reproduce the reference vector: %s", got)
	}
	for _, bad := range []string{"", "whsec_", "whsec_***", "whsec_AAA"} {
		if _, err := signature.DecodeWhsec(bad); err == nil {
			t.Errorf("signature.DecodeWhsec(%q) succeeded", bad)
		}
	}

	// Whatever the dispatcher signs, the receiver verifies, and across a key change.
	verifier := mustNew(t, v.spec(), signature.Secret{Value: v.Secret})
	body := []byte(`{"type":"order.paid","data":{"id":"o_1"}}`)
	sentAt := time.Unix(1700000000, 0)
	req := signature.Request{Header: http.Header{}, Body: body, Now: sentAt.Add(time.Second)}
	req.Header.Set(HeaderWebhookID, "evt_1")
	req.Header.Set(HeaderWebhookTimestamp, fmt.Sprint(sentAt.Unix()))
	req.Header.Set(HeaderWebhookSignature, signature.SignStandardWebhooks(key, "evt_1", sentAt, body))
	expectReason(t, verifier.Verify(req), "", v)
}

func TestStandardWebhooksSignatureList(t *testing.T) {
	v := vectorNamed(t, "standardwebhooks-reference")
	good := v.Headers[HeaderWebhookSignature]
	// Other entries taken from the reference library's multi-signature test.
	other := "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="
	verifier := mustNew(t, v.spec(), signature.Secret{Value: v.Secret})
	expectHeaderValues(t, verifier, v, HeaderWebhookSignature, []headerCase{
		{"valid among others", strings.Join([]string{other, "v2,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=", good, other}, " "), ""},
		{"asymmetric entry ignored", "v1a,aGVsbG8= " + good, ""},
		{"double spaces", other + "  " + good, ""},
		{"only other signatures", other + " " + other, signature.ReasonMismatch},
		{"only other versions", "v2," + strings.TrimPrefix(good, "v1,"), signature.ReasonMalformedHeader},
		{"comma-separated list is not the format", other + "," + good, signature.ReasonMalformedHeader},
		{"missing version", strings.TrimPrefix(good, "v1,"), signature.ReasonMalformedHeader},
		{"url-safe base64", strings.NewReplacer("+", "-", "/", "_").Replace(good), signature.ReasonMalformedHeader},
		{"embedded newline", good[:10] + "\n" + good[10:], signature.ReasonMalformedHeader},
	})
	t.Run("webhook-* and svix-* sets are not mixed", func(t *testing.T) {
		req := v.request()
		req.Header.Del(HeaderWebhookID)
		req.Header.Set("svix-id", v.Headers[HeaderWebhookID])
		expectReason(t, verifier.Verify(req), signature.ReasonMissingHeader, v)
	})
	t.Run("webhook-* wins when both are sent", func(t *testing.T) {
		req := v.request()
		req.Header.Set("svix-id", "msg_other")
		req.Header.Set("svix-timestamp", "1")
		req.Header.Set("svix-signature", other)
		expectReason(t, verifier.Verify(req), "", v)
	})
}

// TestStandardWebhooksKeysOfBothKinds verifies v1 and v1a signatures with an endpoint
// that holds a whsec_ secret and a whpk_ public key, as during a move from symmetric to
// asymmetric signing, and a v1a signature never verifies under the HMAC key.
func TestStandardWebhooksKeysOfBothKinds(t *testing.T) {
	now := time.Unix(1767225600, 0)
	// Even-length bodies are signed with the whsec_ key, odd-length ones with Ed25519.
	symmetric, asymmetric := signStandardWebhooks(t, []byte(`{"a":12}`), now), signStandardWebhooks(t, []byte(`{"a":1}`), now)
	if !strings.HasPrefix(symmetric.secret, "whsec_") || !strings.HasPrefix(asymmetric.secret, "whpk_") {
		t.Fatalf("the signer's key kinds: %q, %q", symmetric.secret[:6], asymmetric.secret[:5])
	}
	both, err := NewVerifier(symmetric.spec, []signature.Secret{{Value: symmetric.secret}, {Value: asymmetric.secret}})
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]signed{"v1": symmetric, "v1a": asymmetric} {
		if _, err := both.Open(s.req); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	onlyHMAC, err := NewVerifier(symmetric.spec, []signature.Secret{{Value: symmetric.secret}})
	if err != nil {
		t.Fatal(err)
	}
	if err := onlyHMAC.Verify(asymmetric.req); signature.ReasonOf(err) != signature.ReasonMismatch && signature.ReasonOf(err) != signature.ReasonMalformedHeader {
		t.Fatalf("a v1a request under a whsec_ key only: %v", err)
	}
	if _, err := NewVerifier(symmetric.spec, []signature.Secret{{Value: "whpk_AAAA"}}); err == nil {
		t.Fatal("a whpk_ key of the wrong length was accepted")
	}
}

// TestTwitchEventSubTimestampAsSent covers what the generic vector suite does for Unix
// timestamps: the RFC 3339 header is signed as sent, so the same instant written
// otherwise, or one nanosecond later, does not verify; and it bounds replays.
func TestTwitchEventSubTimestampAsSent(t *testing.T) {
	v := vectorNamed(t, "twitcheventsub-notification-computed")
	verifier := mustNew(t, v.spec(), signature.Secret{Value: v.Secret})
	for _, ts := range []string{
		"2026-01-01T00:00:00.123456790Z",      // one nanosecond later
		"2026-01-01T00:00:00.1234567890Z",     // the same instant, another spelling
		"2026-01-01T00:00:00.123456789+00:00", // the same instant, another zone form
	} {
		req := v.request()
		req.Header.Set(twitchTimestampHeader, ts)
		if got := signature.ReasonOf(verifier.Verify(req)); got != signature.ReasonMismatch {
			t.Errorf("timestamp %s: want mismatch, got %q", ts, got)
		}
	}
	signedAt := time.Date(2026, 1, 1, 0, 0, 0, 123456789, time.UTC)
	expectTolerance(t, verifier, v, []toleranceCase{
		{"at the signed time", signedAt, ""},
		{"at the edge of the tolerance", signedAt.Add(5 * time.Minute), ""},
		{"just past it", signedAt.Add(5*time.Minute + time.Nanosecond), signature.ReasonTimestampOutOfTolerance},
		{"before a future timestamp's tolerance", signedAt.Add(-5*time.Minute - time.Nanosecond), signature.ReasonTimestampOutOfTolerance},
	})
	// Twitch's own advice is ten minutes; spec.provider.tolerance allows it.
	spec := v.spec()
	spec.Tolerance = &metav1.Duration{Duration: 10 * time.Minute}
	req := v.request()
	req.Now = signedAt.Add(9 * time.Minute)
	if err := mustNew(t, spec, signature.Secret{Value: v.Secret}).Verify(req); err != nil {
		t.Errorf("within a 10m tolerance: %v", err)
	}
	for _, bad := range []string{"2026-01-01 00:00:00Z", "1767225600", "2026-01-01T00:00:00"} {
		req := v.request()
		req.Header.Set(twitchTimestampHeader, bad)
		req.Header.Set(twitchSignatureHeader, twitchSign(v.Secret, req.Header.Get(twitchIDHeader), bad, req.Body))
		if got := signature.ReasonOf(verifier.Verify(req)); got != signature.ReasonMalformedHeader {
			t.Errorf("timestamp %q: want malformed_header, got %q", bad, got)
		}
	}
}

// TestSignaturePrefixes: a signature header's prefix names its scheme; GitHub's and
// Intercom's (`sha1=<hex>`) must be there as sent, Slack's may carry spaces around it.
func TestSignaturePrefixes(t *testing.T) {
	for _, tc := range []struct {
		vector, header, value string
		want                  signature.Reason
	}{
		{"github-docs", "X-Hub-Signature-256", "sha1=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17", signature.ReasonMalformedHeader},
		{"github-docs", "X-Hub-Signature-256", "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17", signature.ReasonMalformedHeader},
		{"github-docs", "X-Hub-Signature-256", "sha256=", signature.ReasonMalformedHeader},
		{"github-docs", "X-Hub-Signature-256", "sha256=757107EA0EB2509FC211221CCE984B8A37570B6D7586C22C46F4379C8B043E17", ""},
		{"github-docs", "X-Hub-Signature-256", "SHA256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17", signature.ReasonMalformedHeader},
		{"slack-docs", "X-Slack-Signature", "v1=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503", signature.ReasonMalformedHeader},
		{"slack-docs", "X-Slack-Signature", "v0=a2114d57", signature.ReasonMalformedHeader},
		{"slack-docs", "X-Slack-Signature", " v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503 ", ""},
		{"intercom-computed", "X-Hub-Signature", "sha1=46468a44f64c0fdf15a214f26b15ca22745f7bed", ""},
		{"intercom-computed", "X-Hub-Signature", "46468a44f64c0fdf15a214f26b15ca22745f7bed", signature.ReasonMalformedHeader},
		{"intercom-computed", "X-Hub-Signature", "sha256=46468a44f64c0fdf15a214f26b15ca22745f7bed", signature.ReasonMalformedHeader},
	} {
		t.Run(tc.vector+" "+tc.value, func(t *testing.T) {
			v := vectorNamed(t, tc.vector)
			req := v.request()
			req.Header.Set(tc.header, tc.value)
			expectReason(t, mustNew(t, v.spec(), signature.Secret{Value: v.Secret}).Verify(req), tc.want, v)
		})
	}
}

func TestHMACSpecValidation(t *testing.T) {
	cases := []struct {
		name string
		spec v1alpha1.HMACSpec
		want string // substring of the error; empty means valid
	}{
		{"defaults", v1alpha1.HMACSpec{SchemeSpec: v1alpha1.SchemeSpec{Header: "X-Sig"}}, ""},
		{"no header", v1alpha1.HMACSpec{}, "header: \"\" is not a valid HTTP header name"},
		{"bad header name", v1alpha1.HMACSpec{SchemeSpec: v1alpha1.SchemeSpec{Header: "X Sig"}}, "not a valid HTTP header name"},
		{"bad timestamp header name", v1alpha1.HMACSpec{SchemeSpec: v1alpha1.SchemeSpec{Header: "X-Sig", TimestampHeader: "X:T", SignedContent: "{timestamp}{body}"}}, "timestampHeader"},
		{"unknown algorithm", v1alpha1.HMACSpec{SchemeSpec: v1alpha1.SchemeSpec{Header: "X-Sig"}, Algorithm: "MD5"}, "algorithm"},
		{"unknown encoding", v1alpha1.HMACSpec{SchemeSpec: v1alpha1.SchemeSpec{Header: "X-Sig", Encoding: "Base32"}}, "encoding"},
		{"unknown key encoding", v1alpha1.HMACSpec{SchemeSpec: v1alpha1.SchemeSpec{Header: "X-Sig"}, KeyEncoding: "PEM"}, "keyEncoding"},
		{"unknown placeholder", v1alpha1.HMACSpec{SchemeSpec: v1alpha1.SchemeSpec{Header: "X-Sig", SignedContent: "{verb}.{body}"}}, "unknown placeholder {verb}"},
		{"no body", v1alpha1.HMACSpec{SchemeSpec: v1alpha1.SchemeSpec{Header: "X-Sig", SignedContent: "{timestamp}", TimestampHeader: "X-T"}}, "must include {body}"},
		{"timestamp without header", v1alpha1.HMACSpec{SchemeSpec: v1alpha1.SchemeSpec{Header: "X-Sig", SignedContent: "{timestamp}.{body}"}}, "signedContent uses {timestamp}: set timestampHeader"},
		{"timestamp header not signed", v1alpha1.HMACSpec{SchemeSpec: v1alpha1.SchemeSpec{Header: "X-Sig", TimestampHeader: "X-T"}}, "would not be authenticated"},
		{"id without header", v1alpha1.HMACSpec{SchemeSpec: v1alpha1.SchemeSpec{Header: "X-Sig", SignedContent: "{id}.{body}"}}, "idHeader must be set exactly when signedContent uses {id}"},
		{"id header not signed", v1alpha1.HMACSpec{SchemeSpec: v1alpha1.SchemeSpec{Header: "X-Sig", IDHeader: "X-Id"}}, "idHeader must be set exactly when signedContent uses {id}"},
		{"literal braces are fine", v1alpha1.HMACSpec{SchemeSpec: v1alpha1.SchemeSpec{Header: "X-Sig", SignedContent: "{\"x\":{body}} {1}"}}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.spec
			_, err := NewVerifier(v1alpha1.ProviderSpec{Type: v1alpha1.ProviderHMAC, HMAC: &spec}, []signature.Secret{{Value: "k"}})
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("valid spec rejected: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("want error containing %q, got %v", tc.want, err)
			}
		})
	}
}

func TestNewRejectsUnusableSpecs(t *testing.T) {
	secrets := []signature.Secret{{Value: "k"}}
	for name, spec := range map[string]v1alpha1.ProviderSpec{
		"unknown type":        {Type: "NoSuchProvider"},
		"empty type":          {},
		"HMAC without block":  {Type: v1alpha1.ProviderHMAC},
		"block with a preset": {Type: v1alpha1.ProviderGitHub, HMAC: &v1alpha1.HMACSpec{SchemeSpec: v1alpha1.SchemeSpec{Header: "X-Sig"}}},
		"zero tolerance":      {Type: v1alpha1.ProviderSlack, Tolerance: &metav1.Duration{}},
		"negative tolerance":  {Type: v1alpha1.ProviderStripe, Tolerance: &metav1.Duration{Duration: -time.Second}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := NewVerifier(spec, secrets); err == nil {
				t.Fatal("New accepted an unusable spec")
			}
		})
	}
}

func TestGenericSeparatorList(t *testing.T) {
	v := vectorNamed(t, "hmac-sha512-base64-base64key")
	spec := *v.HMAC
	spec.Separator = ","
	spec.Prefix = "sha512="
	verifier := mustNew(t, v1alpha1.ProviderSpec{Type: v1alpha1.ProviderHMAC, HMAC: &spec}, signature.Secret{Value: v.Secret})
	good := "sha512=" + v.Headers["X-Signature"]
	expectHeaderValues(t, verifier, v, "X-Signature", []headerCase{
		{"one entry", good, ""},
		{"a malformed entry before the good one", "sha512=AAAA," + good, ""},
		{"another prefix", "sha256=" + v.Headers["X-Signature"], signature.ReasonMalformedHeader},
		{"a truncated entry before a malformed one", good[:len(good)-4] + ",sha512=AAAA", signature.ReasonMalformedHeader},
		{"a well-formed wrong MAC", "sha512=" + strings.Repeat("A", 86) + "==", signature.ReasonMismatch},
	})
}

func TestErrorAndReasonOf(t *testing.T) {
	if signature.ReasonOf(nil) != "" {
		t.Fatal("signature.ReasonOf(nil) is not empty")
	}
	if signature.ReasonOf(errors.New("other")) != "" {
		t.Fatal("signature.ReasonOf of a foreign error is not empty")
	}
	e := &signature.Error{Reason: signature.ReasonMismatch, Detail: "no active secret matches"}
	wrapped := fmt.Errorf("verify request: %w", e)
	if signature.ReasonOf(wrapped) != signature.ReasonMismatch {
		t.Fatal("signature.ReasonOf does not see through wrapping")
	}
	if got := e.Error(); got != "signature verification failed: mismatch: no active secret matches" {
		t.Fatalf("signature.Error() = %q", got)
	}
	if got := (&signature.Error{Reason: signature.ReasonMissingHeader}).Error(); got != "signature verification failed: missing_header" {
		t.Fatalf("signature.Error() without detail = %q", got)
	}
}

// The published Standard Webhooks vector (svix-* names) verifies under Clerk and Resend
// too: they are that scheme, not a look-alike.
func TestSvixProvidersVerifyTheStandardWebhooksReference(t *testing.T) {
	v := vectorNamed(t, "svix-headers-reference")
	for _, typ := range []v1alpha1.ProviderType{ProviderClerk, ProviderResend} {
		t.Run(string(typ), func(t *testing.T) {
			verifier := mustNew(t, v1alpha1.ProviderSpec{Type: typ}, signature.Secret{Value: v.Secret})
			verified, err := verifier.Open(v.request())
			if err != nil {
				t.Fatal(err)
			}
			if got := verified.Signed()[signature.SignedID]; got != v.Headers["svix-id"] {
				t.Fatalf("signed.id = %q, want the svix-id", got)
			}
			req := v.request()
			req.Now = req.Now.Add(v1alpha1.DefaultTolerance + time.Minute)
			expectReason(t, verifier.Verify(req), signature.ReasonTimestampOutOfTolerance, v)
		})
	}
}
