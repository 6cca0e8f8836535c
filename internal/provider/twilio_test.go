package provider

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

const (
	twilioToken = "twilio test auth token"
	twilioURL   = "https://hooks.example.com/twilio/status?tenant=shop"
)

func twilioVerifierAt(t *testing.T, signedURL string) signature.Verifier {
	t.Helper()
	return mustNew(t, v1alpha1.ProviderSpec{Type: ProviderTwilio, SignedURL: signedURL}, signature.Secret{Value: twilioToken})
}

func twilioRequest(body, sig string) signature.Request {
	h := http.Header{}
	h.Set(HeaderTwilioSignature, sig)
	return postRequest(h, []byte(body), time.Unix(1767225600, 0))
}

// twilioDocument opens req and returns its one document, failing the test unless it
// verified and carries one.
func twilioDocument(t *testing.T, v signature.Verifier, req signature.Request) (map[string]any, *signature.Verified) {
	t.Helper()
	verified, err := v.Open(req)
	if err != nil {
		t.Fatalf("does not verify: %v", err)
	}
	docs, err := verified.Documents()
	if err != nil || len(docs) != 1 {
		t.Fatalf("documents: %v (%d)", err, len(docs))
	}
	var doc map[string]any
	if err := json.Unmarshal(docs[0], &doc); err != nil {
		t.Fatalf("the document is not a JSON object: %v", err)
	}
	return doc, verified
}

var twilioStatus = url.Values{
	"AccountSid": {"AC00112233445566778899aabbccddeeff"}, "MessageSid": {"SM1f0e2d3c4b5a69788796a5b4c3d2e1f0"},
	"MessageStatus": {"delivered"}, "SmsStatus": {"delivered"}, "To": {"+15558675310"}, "From": {"+15017122661"},
	"ApiVersion": {"2010-04-01"},
}

func TestTwilioFormAndJSONAreDecidedByTheBytes(t *testing.T) {
	v := twilioVerifierAt(t, twilioURL)
	form := twilioStatus.Encode()
	jsonBody := `{"MessageSid":"SM1","MessageStatus":"sent"}`

	t.Run("form", func(t *testing.T) {
		req := twilioRequest(form, twilioSignForm(twilioToken, twilioURL, twilioStatus))
		req.Header.Set("Content-Type", "application/json") // unsigned, and ignored
		doc, verified := twilioDocument(t, v, req)
		if doc["MessageSid"] != "SM1f0e2d3c4b5a69788796a5b4c3d2e1f0" || doc["To"] != "+15558675310" || len(doc) != len(twilioStatus) {
			t.Fatalf("the document is not the form's fields: %v", doc)
		}
		// The digest is of the signed text after the URL: names and values sorted.
		signedText := "AccountSidAC00112233445566778899aabbccddeeffApiVersion2010-04-01From+15017122661" +
			"MessageSidSM1f0e2d3c4b5a69788796a5b4c3d2e1f0MessageStatusdeliveredSmsStatusdeliveredTo+15558675310"
		if got := verified.Signed()[signature.SignedDigest]; got != signature.BodyDigest([]byte(signedText)) {
			t.Fatalf("signed.digest of a form is %q, want the digest of its signed text", got)
		}
	})
	t.Run("JSON", func(t *testing.T) {
		req := twilioRequest(jsonBody, twilioSignJSON(twilioToken, twilioURL, []byte(jsonBody)))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		doc, verified := twilioDocument(t, v, req)
		if doc["MessageStatus"] != "sent" {
			t.Fatalf("document %v", doc)
		}
		if got := verified.Signed()[signature.SignedDigest]; got != signature.BodyDigest([]byte(jsonBody)) {
			t.Fatalf("signed.digest of a JSON body is %q, want the body's", got)
		}
	})
	t.Run("JSON with leading whitespace", func(t *testing.T) {
		body := "\n  " + jsonBody
		twilioDocument(t, v, twilioRequest(body, twilioSignJSON(twilioToken, twilioURL, []byte(body))))
	})
	t.Run("a JSON body under a form signature", func(t *testing.T) {
		// The signature of the URL alone (a form without fields) never verifies a
		// JSON body: that would leave the body unsigned.
		req := twilioRequest(jsonBody, twilioSignForm(twilioToken, twilioURL, url.Values{}))
		if got := signature.ReasonOf(v.Verify(req)); got != signature.ReasonMismatch {
			t.Fatalf("want mismatch, got %q", got)
		}
	})
	t.Run("a form body under a JSON signature", func(t *testing.T) {
		req := twilioRequest(form, twilioSignJSON(twilioToken, twilioURL, []byte(form)))
		if got := signature.ReasonOf(v.Verify(req)); got != signature.ReasonMismatch {
			t.Fatalf("want mismatch, got %q", got)
		}
	})
	t.Run("every spelling of one signed form has one digest", func(t *testing.T) {
		// Twilio signs decoded fields joined without separators, not bytes: reordering
		// or re-escaping the fields, or moving the boundary between two of them, verifies
		// too. All of them must have the digest the id preset is, so such a replay is a
		// duplicate.
		sig := twilioSignForm(twilioToken, twilioURL, twilioStatus)
		_, a := twilioDocument(t, v, twilioRequest(form, sig))
		for name, spelling := range map[string]string{
			"reordered and re-escaped": "To=%2b15558675310&From=%2B15017122661&ApiVersion=2010-04-01&MessageSid=SM1f0e2d3c4b5a69788796a5b4c3d2e1f0&" +
				"MessageStatus=delivered&SmsStatus=delivered&AccountSid=AC00112233445566778899aabbccddeeff",
			"MessageSid merged into From": "AccountSid=AC00112233445566778899aabbccddeeff&ApiVersion=2010-04-01&" +
				"From=%2B15017122661MessageSidSM1f0e2d3c4b5a69788796a5b4c3d2e1f0&MessageStatus=delivered&SmsStatus=delivered&To=%2B15558675310",
		} {
			doc, b := twilioDocument(t, v, twilioRequest(spelling, sig))
			if a.Signed()[signature.SignedDigest] != b.Signed()[signature.SignedDigest] {
				t.Fatalf("%s: another digest for the same signed content (%v)", name, doc)
			}
		}
	})
	t.Run("neither", func(t *testing.T) {
		req := twilioRequest("a=1;b=2", twilioSignForm(twilioToken, twilioURL, url.Values{}))
		if got := signature.ReasonOf(v.Verify(req)); got != signature.ReasonMalformedHeader {
			t.Fatalf("want malformed, got %q", got)
		}
	})
}

func TestTwilioBodySHA256(t *testing.T) {
	v := twilioVerifierAt(t, twilioURL)
	body := []byte(`{"MessageSid":"SM1","MessageStatus":"sent"}`)
	other := []byte(`{"MessageSid":"SM1","MessageStatus":"failed"}`)
	for name, req := range map[string]signature.Request{
		"a body under another body's bodySHA256": twilioRequest(string(other), twilioSignJSON(twilioToken, twilioURL, body)),
		"one byte of the body changed":           twilioRequest(strings.Replace(string(body), "sent", "Sent", 1), twilioSignJSON(twilioToken, twilioURL, body)),
		"whitespace added to the body":           twilioRequest(string(body)+" ", twilioSignJSON(twilioToken, twilioURL, body)),
		"the URL signed without bodySHA256":      twilioRequest(string(body), twilioSignForm(twilioToken, twilioURL, url.Values{})),
	} {
		t.Run(name, func(t *testing.T) {
			if got := signature.ReasonOf(v.Verify(req)); got != signature.ReasonMismatch {
				t.Fatalf("want mismatch, got %q", got)
			}
		})
	}
	t.Run("bodySHA256 appended with ? to a URL without a query", func(t *testing.T) {
		const bare = "https://hooks.example.com/twilio/status"
		req := twilioRequest(string(body), twilioSignJSON(twilioToken, bare, body))
		if err := twilioVerifierAt(t, bare).Verify(req); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("the JSON signature replayed as a form of its signed text", func(t *testing.T) {
		// URL + "&bodySHA256=<hex>" is also URL + a field "&bodySHA256" with value "=<hex>":
		// a form body spelling that must not verify under the JSON delivery's signature.
		sum := sha256.Sum256(body)
		sig := twilioSignJSON(twilioToken, twilioURL, body)
		for _, forged := range []string{
			url.QueryEscape("&bodySHA256") + "=" + url.QueryEscape("="+hex.EncodeToString(sum[:])),
			"=" + url.QueryEscape("&bodySHA256="+hex.EncodeToString(sum[:])),
		} {
			if err := v.Verify(twilioRequest(forged, sig)); err == nil {
				t.Fatalf("the form %q verified under a JSON delivery's signature", forged)
			}
		}
	})
	t.Run("the JSON signature replayed as a form through another URL variant", func(t *testing.T) {
		// signedURL with an explicit default port and no path: the port-less variant
		// followed by one field named ":443?bodySHA256=" whose value is the hex spells the JSON delivery's
		// signed text, with no field name starting like a query continuation.
		sum := sha256.Sum256(body)
		for _, configured := range []string{"https://sms.example.com:443", "http://sms.example.com:80"} {
			sig := twilioSignJSON(twilioToken, configured, body)
			v := twilioVerifierAt(t, configured)
			if err := v.Verify(twilioRequest(string(body), sig)); err != nil {
				t.Fatalf("%s: the JSON delivery itself does not verify: %v", configured, err)
			}
			port := configured[strings.LastIndexByte(configured, ':'):]
			forged := url.Values{port + "?bodySHA256=": {hex.EncodeToString(sum[:])}}.Encode()
			if got := signature.ReasonOf(v.Verify(twilioRequest(forged, sig))); got != signature.ReasonMalformedHeader {
				t.Errorf("%s: the form %q under the JSON delivery's signature: reason %q, want %q",
					configured, forged, got, signature.ReasonMalformedHeader)
			}
		}
	})
}

func TestTwilioDuplicateFormField(t *testing.T) {
	v := twilioVerifierAt(t, twilioURL)
	dup := url.Values{"MessageSid": {"SM1"}, "MessageStatus": {"delivered", "failed"}}
	body := "MessageSid=SM1&MessageStatus=delivered&MessageStatus=failed"

	t.Run("signed, but ambiguous", func(t *testing.T) {
		verified, err := v.Open(twilioRequest(body, twilioSignForm(twilioToken, twilioURL, dup)))
		if err != nil {
			t.Fatalf("a signed form with a repeated field does not verify: %v", err)
		}
		if _, err := verified.Documents(); err == nil || !strings.Contains(err.Error(), "MessageStatus") {
			t.Fatalf("want an unreadable document naming the field, got %v", err)
		}
	})
	t.Run("a value appended to a signed form", func(t *testing.T) {
		single := url.Values{"MessageSid": {"SM1"}, "MessageStatus": {"delivered"}}
		req := twilioRequest(single.Encode()+"&MessageStatus=failed", twilioSignForm(twilioToken, twilioURL, single))
		if got := signature.ReasonOf(v.Verify(req)); got != signature.ReasonMismatch {
			t.Fatalf("want mismatch, got %q", got)
		}
	})
	t.Run("a field that is not UTF-8", func(t *testing.T) {
		bad := url.Values{"Body": {"caf\xe9"}, "MessageSid": {"SM1"}}
		verified, err := v.Open(twilioRequest(bad.Encode(), twilioSignForm(twilioToken, twilioURL, bad)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := verified.Documents(); err == nil {
			t.Fatal("a form field that is not UTF-8 became a document (encoding/json would alter it)")
		}
	})
}

func TestTwilioSignedURL(t *testing.T) {
	body := twilioStatus.Encode()
	sig := twilioSignForm(twilioToken, twilioURL, twilioStatus)
	for _, tc := range []struct {
		name, configured string
		verifies         bool
	}{
		{"as signed", twilioURL, true},
		{"with the default port Twilio may sign", "https://hooks.example.com:443/twilio/status?tenant=shop", true},
		{"another path", "https://hooks.example.com/twilio/other?tenant=shop", false},
		{"another query", "https://hooks.example.com/twilio/status?tenant=other", false},
		{"no query", "https://hooks.example.com/twilio/status", false},
		{"http instead of https", "http://hooks.example.com/twilio/status?tenant=shop", false},
		{"another host", "https://hooks.example.org/twilio/status?tenant=shop", false},
		{"a trailing slash", "https://hooks.example.com/twilio/status/?tenant=shop", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := twilioVerifierAt(t, tc.configured).Verify(twilioRequest(body, sig))
			if tc.verifies && err != nil {
				t.Fatal(err)
			}
			if !tc.verifies && signature.ReasonOf(err) != signature.ReasonMismatch {
				t.Fatalf("want mismatch, got %v", err)
			}
		})
	}
	t.Run("signed with the port, configured without", func(t *testing.T) {
		withPort := twilioSignForm(twilioToken, "https://hooks.example.com:443/twilio/status?tenant=shop", twilioStatus)
		if err := twilioVerifierAt(t, twilioURL).Verify(twilioRequest(body, withPort)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a signedURL is required", func(t *testing.T) {
		if _, err := NewVerifier(v1alpha1.ProviderSpec{Type: ProviderTwilio}, []signature.Secret{{Value: twilioToken}}); err == nil {
			t.Fatal("a Twilio verifier without signedURL was built")
		}
	})
	t.Run("published vector under the URL's port variants", func(t *testing.T) {
		v := vectorNamed(t, "twilio-go-form")
		for _, u := range []string{"https://mycompany.com:443/myapp.php?foo=1&bar=2", "https://mycompany.com:1234/myapp.php?foo=1&bar=2"} {
			spec := v.spec()
			spec.SignedURL = u
			if err := mustNew(t, spec, signature.Secret{Value: v.Secret}).Verify(v.request()); err != nil {
				t.Fatalf("%s: %v (twilio-go accepts it)", u, err)
			}
		}
	})
}

func TestTwilioURLVariants(t *testing.T) {
	for in, want := range map[string][]string{
		"https://a.example/p?q=1":          {"https://a.example/p?q=1", "https://a.example:443/p?q=1"},
		"http://a.example":                 {"http://a.example", "http://a.example:80"},
		"https://a.example:8443/p":         {"https://a.example:8443/p", "https://a.example/p"},
		"https://u:p@a.example/p":          {"https://u:p@a.example/p", "https://u:p@a.example:443/p"},
		"https://[2001:db8::1]/p":          {"https://[2001:db8::1]/p", "https://[2001:db8::1]:443/p"},
		"https://[2001:db8::1]:8443/p?x=:": {"https://[2001:db8::1]:8443/p?x=:", "https://[2001:db8::1]/p?x=:"},
		"not a url":                        {"not a url"},
	} {
		if got := twilioURLVariants(in); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: got %q, want %q", in, got, want)
		}
	}
}

// TestTwilioPresets: the kinds of Twilio callbacks (the vectors' are rows of
// TestPresetsOverVectors).
func TestTwilioPresets(t *testing.T) {
	open := func(t *testing.T, form url.Values) (*signature.Verified, map[string]any) {
		t.Helper()
		vals, verified := presetsOfSigned(t, signed{
			spec:   v1alpha1.ProviderSpec{Type: ProviderTwilio, SignedURL: twilioURL},
			secret: twilioToken,
			req:    twilioRequest(form.Encode(), twilioSignForm(twilioToken, twilioURL, form)),
		}, nil)
		return verified, vals.raw()
	}
	t.Run("each status of a message is its own event", func(t *testing.T) {
		sent := url.Values{"MessageSid": {"SM9"}, "MessageStatus": {"sent"}, "SmsStatus": {"sent"}}
		delivered := url.Values{"MessageSid": {"SM9"}, "MessageStatus": {"delivered"}, "SmsStatus": {"delivered"}}
		_, a := open(t, sent)
		_, b := open(t, delivered)
		if a["id"] == b["id"] || a["type"] != "message.sent" || b["type"] != "message.delivered" {
			t.Fatalf("presets %v and %v", a, b)
		}
	})
	t.Run("an inbound message", func(t *testing.T) {
		if _, got := open(t, url.Values{"MessageSid": {"SM9"}, "SmsStatus": {"received"}, "Body": {"hi"}}); got["type"] != "message.received" || got["entityKey"] != "SM9" {
			t.Fatalf("presets %v", got)
		}
	})
	t.Run("a recording callback", func(t *testing.T) {
		if _, got := open(t, url.Values{"CallSid": {"CA1"}, "RecordingSid": {"RE1"}, "RecordingStatus": {"completed"}}); got["type"] != "recording.completed" || got["entityKey"] != "CA1" {
			t.Fatalf("presets %v", got)
		}
	})
	t.Run("a Conversations event", func(t *testing.T) {
		if _, got := open(t, url.Values{"EventType": {"onConversationAdded"}, "ChatServiceSid": {"IS1"}}); got["type"] != "onConversationAdded" {
			t.Fatalf("presets %v", got)
		}
	})
}

// FuzzTwilioRoundTrip is the round trip of FuzzProviders for Twilio alone.
//
//	go test -run='^$' -fuzz='^FuzzTwilioRoundTrip$' -fuzztime=20s ./internal/provider/
func FuzzTwilioRoundTrip(f *testing.F) {
	providerRoundTrip(f, ProviderTwilio, []byte(`{"MessageSid":"SM1","MessageStatus":"sent"}`), []byte("MessageSid=SM1&MessageStatus=sent"), []byte(" {"))
}
