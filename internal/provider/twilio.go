package provider

import (
	"bytes"
	"crypto/sha1" //nolint:gosec // Twilio signs with HMAC-SHA1; HMAC does not rely on SHA-1's collision resistance.
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// ProviderTwilio is the spec.provider.type of Twilio.
const ProviderTwilio v1alpha1.ProviderType = "Twilio"

// HeaderTwilioSignature carries Twilio's base64 HMAC-SHA1.
const HeaderTwilioSignature = "X-Twilio-Signature"

// twilioVerifier implements Twilio's request signature (Twilio docs, "Webhooks
// Security", section "Validating signatures from Twilio"): base64 HMAC-SHA1 under the
// account's Auth Token of the full URL Twilio requested (spec.provider.signedURL)
// followed, for an application/x-www-form-urlencoded body, by every POST parameter
// sorted by name, each name immediately followed by its value. For a JSON body Twilio
// appends a bodySHA256 query parameter (hex SHA-256 of the raw body) to the URL and
// signs the URL alone; the verifier computes that parameter from the body it received,
// so the signature covers every byte of a JSON body.
//
// Which form a body is, is decided by its bytes (a first non-space byte '{' is JSON,
// anything else a form), never by the unsigned Content-Type header. Twilio signs no
// timestamp and no delivery id: a captured request verifies forever.
type twilioVerifier struct {
	keys *signature.Keyring
	// urls are the signed URL as configured, and with the port Twilio's signing may add
	// or drop (its SDKs accept both, "since sig generation on back-end is inconsistent").
	urls []string
}

func init() {
	register(Provider{
		Type: ProviderTwilio,
		Verifier: func(spec v1alpha1.ProviderSpec, secrets []signature.Secret, _ time.Duration) (signature.Verifier, error) {
			if spec.SignedURL == "" {
				return nil, errors.New("provider.signedURL is required for Twilio")
			}
			keys, err := signature.NewHMACKeyring(sha1.New, v1alpha1.KeyRaw, secrets)
			if err != nil {
				return nil, err
			}
			return verifierOf{&twilioVerifier{keys: keys, urls: twilioURLVariants(spec.SignedURL)}}, nil
		},
		NeedsURL: true,
		Preset: Preset{
			// The digest of what was signed, not MessageSid:MessageStatus: Twilio joins
			// names and values without separators, so field boundaries are not signed and
			// a replay could move them (a MessageSid merged into the field before it, say)
			// to change any id read from the fields. Every spelling of one signed request
			// has one digest; each status callback differs at least in its status.
			ID: `signed.digest`,
			Type: `has(body.MessageStatus) ? "message." + body.MessageStatus : ` +
				`has(body.SmsStatus) ? "message." + body.SmsStatus : ` +
				`has(body.RecordingStatus) ? "recording." + body.RecordingStatus : ` +
				`has(body.CallStatus) ? "call." + body.CallStatus : ` +
				`has(body.EventType) ? body.EventType : body.type`,
			EntityKey: `has(body.MessageSid) ? body.MessageSid : body.CallSid`,
		},
		Sign:   twilioSigner,
		Sample: twilioSample,
		Doc: Doc{
			Scheme: "HMAC-SHA1 base64 in `X-Twilio-Signature`",
			Signed: "`spec.provider.signedURL` and every form field (names and values, sorted by name, without separators: " +
				"the boundaries between fields are not signed); for a JSON body the URL with `bodySHA256` (the SHA-256 of the raw body) appended",
			Key: "the account's Auth Token (raw)",
		},
	})
}

// Open verifies the request and returns its document: a JSON body as it is, a form body
// as a JSON object of its fields (each name once; a repeated name is refused as
// ambiguous, after the signature checked).
func (v *twilioVerifier) Open(req signature.Request) (*signature.Verified, error) {
	keys, sig, ferr := activeHeaderSignature(v.keys, req, HeaderTwilioSignature, v1alpha1.EncodingBase64, "a base64 HMAC-SHA1")
	if ferr != nil {
		return nil, ferr
	}
	if twilioJSON(req.Body) {
		return v.openJSON(req, keys, sig)
	}
	return v.openForm(req, keys, sig)
}

// openJSON checks a JSON body: the URL with bodySHA256 appended.
func (v *twilioVerifier) openJSON(req signature.Request, keys []signature.Key, sig []byte) (*signature.Verified, error) {
	for _, u := range v.urls {
		if _, ok := v.keys.Match(keys, [][]byte{sig}, []byte(u), []byte(twilioBodyParam(u, req.Body))); ok {
			signed := map[string]string{signature.SignedDigest: signature.BodyDigest(req.Body)}
			return signature.NewVerified(req.Now, []json.RawMessage{req.Body}, signed), nil
		}
	}
	return nil, signature.Fail(signature.ReasonMismatch, "no active secret produces the signature in %s over the signed URL and the body's SHA-256", HeaderTwilioSignature)
}

// openForm checks a form body: the URL, then each field name and value sorted by name.
func (v *twilioVerifier) openForm(req signature.Request, keys []signature.Key, sig []byte) (*signature.Verified, error) {
	form, err := url.ParseQuery(string(req.Body))
	if err != nil {
		return nil, signature.Fail(signature.ReasonMalformedHeader, "the body is neither a JSON object nor a form")
	}
	for name := range form {
		// Twilio concatenates without separators, so field boundaries are not signed. A
		// field name that is empty or starts like a query continuation would let the
		// signature of a JSON delivery (URL + "&bodySHA256=…") verify a form body made of
		// that text; Twilio sends no such names.
		if name == "" || name[0] == '&' || name[0] == '?' {
			return nil, signature.Fail(signature.ReasonMalformedHeader, "the form has a field name Twilio does not send")
		}
	}
	names, fieldParts := twilioFormParts(form)
	// parts[0] is the URL variant being tried.
	parts := append([][]byte{nil}, fieldParts...)
	fields := bytes.Join(fieldParts, nil)
	matched := false
	for _, u := range v.urls {
		parts[0] = []byte(u)
		if _, ok := v.keys.Match(keys, [][]byte{sig}, parts...); ok {
			matched = true
			break
		}
	}
	if !matched {
		return nil, signature.Fail(signature.ReasonMismatch, "no active secret produces the signature in %s over the signed URL and the form fields", HeaderTwilioSignature)
	}
	if v.spellsJSON(string(parts[0]), fields) {
		return nil, signature.Fail(signature.ReasonMalformedHeader, "the form's signed text is that of a JSON delivery (a URL with bodySHA256): Twilio sends no such form")
	}
	// The raw form bytes are not what is signed: the same fields reordered, re-encoded, or
	// with the boundaries between names and values moved verify too. The digest is of
	// the signed text after the URL, which all of them share.
	signed := map[string]string{signature.SignedDigest: signature.BodyDigest(fields)}
	doc, err := twilioFormDocument(form, names)
	if err != nil {
		return signature.Unreadable(req.Now, err, signed), nil
	}
	return signature.NewVerified(req.Now, []json.RawMessage{doc}, signed), nil
}

// spellsJSON reports whether a form's signed text, u followed by its fields, is also
// the signed text of a JSON delivery: a URL variant, "?" or "&", "bodySHA256=" and 64
// lower-case hex digits. The field boundaries are not signed, and a URL variant may be
// another's prefix (https://host and https://host:443), so a form can be built to spell
// it (one field named ":443?bodySHA256=" whose value is the hex): the signature of a
// captured JSON delivery would then verify a form of the attacker's making.
func (v *twilioVerifier) spellsJSON(u string, fields []byte) bool {
	text := u + string(fields)
	for _, w := range v.urls {
		hexDigest, ok := strings.CutPrefix(text, w+twilioParamPrefix(w))
		if ok && len(hexDigest) == 2*sha256.Size && strings.Trim(hexDigest, "0123456789abcdef") == "" {
			return true
		}
	}
	return false
}

// twilioJSON reports whether Twilio signs body as JSON: its first non-space byte is '{'.
func twilioJSON(body []byte) bool {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	return len(trimmed) > 0 && trimmed[0] == '{'
}

// twilioBodyParam is what Twilio appends to the signed URL u for a JSON body: the
// bodySHA256 query parameter, the hex SHA-256 of the body.
func twilioBodyParam(u string, body []byte) string {
	sum := sha256.Sum256(body)
	return twilioParamPrefix(u) + hex.EncodeToString(sum[:])
}

// twilioParamPrefix starts the bodySHA256 parameter: after "?", or "&" when u has a
// query already.
func twilioParamPrefix(u string) string {
	if strings.Contains(u, "?") {
		return "&bodySHA256="
	}
	return "?bodySHA256="
}

// twilioFormParts returns the form's field names, sorted, and what Twilio signs of the
// fields after the URL: each name followed by its value, in name order. A repeated
// name contributes every distinct value, sorted, as Twilio's own libraries sign
// repeated parameters (the verifier refuses its document in any case).
func twilioFormParts(form url.Values) ([]string, [][]byte) {
	names := slices.Sorted(maps.Keys(form))
	parts := make([][]byte, 0, 2*len(form))
	for _, name := range names {
		values := slices.Clone(form[name])
		slices.Sort(values)
		for _, value := range slices.Compact(values) {
			parts = append(parts, []byte(name), []byte(value))
		}
	}
	return names, parts
}

// twilioFormDocument renders the verified form as one JSON object, keys sorted.
func twilioFormDocument(form url.Values, names []string) (json.RawMessage, error) {
	fields := make(map[string]string, len(form))
	for _, name := range names {
		values := form[name]
		if len(values) != 1 {
			return nil, fmt.Errorf("the form repeats the field %q: which value was meant is ambiguous", name)
		}
		if !utf8.ValidString(name) || !utf8.ValidString(values[0]) {
			// encoding/json would replace the bytes, recording what Twilio did not sign.
			return nil, fmt.Errorf("the form field %q is not UTF-8", name)
		}
		fields[name] = values[0]
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(fields); err != nil {
		return nil, err
	}
	return json.RawMessage(bytes.TrimRight(buf.Bytes(), "\n")), nil
}

// twilioURLVariants returns the configured URL and, like Twilio's SDKs, the same URL
// with the scheme's default port added when it has none, or with its port removed. The
// URL is edited as text, never re-serialised, so everything else stays byte for byte.
func twilioURLVariants(configured string) []string {
	out := []string{configured}
	scheme, rest, ok := strings.Cut(configured, "://")
	if !ok {
		return out
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	userinfo := ""
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		userinfo, authority = authority[:at+1], authority[at+1:]
	}
	host, port := authority, ""
	if i := strings.LastIndexByte(authority, ':'); i >= 0 && !strings.Contains(authority[i:], "]") {
		host, port = authority[:i], authority[i+1:]
	}
	build := func(hostport string) string { return scheme + "://" + userinfo + hostport + tail }
	if port != "" {
		out = append(out, build(host))
	} else {
		switch strings.ToLower(scheme) {
		case "https":
			out = append(out, build(host+":443"))
		case "http":
			out = append(out, build(host+":80"))
		}
	}
	return slices.Compact(out)
}

// twilioSample is a form like Twilio's callbacks: EventType is the type, MessageSid
// the entity key; its id is the digest of the signed fields.
func twilioSample(e SampleEvent) (Delivery, error) {
	form := url.Values{
		"AccountSid": {"AChookkeepertest"}, "MessageSid": {e.EntityKey}, "EventType": {e.Type},
		"HookkeeperTestId": {e.ID},
	}
	h := http.Header{}
	h.Set("Content-Type", "application/x-www-form-urlencoded")
	return Delivery{Body: []byte(form.Encode()), Header: h}, nil
}

// twilioSigner signs as Twilio does: a JSON body (first non-space byte '{') as
// signedURL with bodySHA256 appended, a form as signedURL followed by every field name
// and value sorted by name.
func twilioSigner(spec v1alpha1.ProviderSpec, secret string, d Delivery) (Delivery, error) {
	key, err := signature.NewHMACSigningKey(sha1.New, v1alpha1.KeyRaw, secret)
	if err != nil {
		return Delivery{}, fmt.Errorf("signing secret: %w", err)
	}
	parts := [][]byte{[]byte(spec.SignedURL)}
	if twilioJSON(d.Body) {
		parts = append(parts, []byte(twilioBodyParam(spec.SignedURL, d.Body)))
	} else {
		form, err := url.ParseQuery(string(d.Body))
		if err != nil {
			return Delivery{}, fmt.Errorf("the body is neither a JSON object nor a form: %w", err)
		}
		_, fields := twilioFormParts(form)
		parts = append(parts, fields...)
	}
	d.Header.Set(HeaderTwilioSignature, signature.EncodeSignature(v1alpha1.EncodingBase64, key.Sign(parts...)))
	return d, nil
}
