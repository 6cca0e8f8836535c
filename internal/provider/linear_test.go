package provider

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/internal/signature"
)

func TestLinearPresets(t *testing.T) {
	v := vectorNamed(t, "linear-sdk")
	want := presetValues{
		ID:         "Comment:create:2174add1-f7c8-44e3-bbf3-2d60b5ea8bc9:2020-01-23T12:53:18.084Z",
		Type:       "Comment.create",
		EntityKey:  "2174add1-f7c8-44e3-bbf3-2d60b5ea8bc9",
		OccurredAt: presetPtr(time.Date(2020, 1, 23, 12, 53, 18, 84e6, time.UTC)),
	}
	expectPresetValues(t, presetValuesOf(t, vectorSigned(v), nil), want)
	// Linear-Delivery is not signed: another value changes nothing.
	expectPresetValues(t, presetValuesOf(t, vectorSigned(v), map[string]string{"linear-delivery": "other"}), want)

	t.Run("a retry sent later keeps the id", func(t *testing.T) {
		now := time.Unix(v.Now, 0).Add(time.Hour)
		retry := strings.Replace(v.Body, `"webhookTimestamp":1677611643000`, `"webhookTimestamp":`+strconv.FormatInt(now.UnixMilli(), 10), 1)
		s := signed{spec: v.spec(), secret: v.Secret, req: linearRequest(v.Secret, []byte(retry), now)}
		expectPresetValues(t, presetValuesOf(t, s, nil), want)
	})
	t.Run("a payload without data.id falls back to the digest without webhookTimestamp", func(t *testing.T) {
		body := func(client string, sent time.Time) []byte {
			return []byte(`{"action":"revoked","type":"OAuthApp","createdAt":"2026-03-01T12:00:00.000Z","oauthClientId":"` + client + `",` +
				`"organizationId":"o1","webhookId":"w1","webhookTimestamp":` + strconv.FormatInt(sent.UnixMilli(), 10) + `}`)
		}
		idOf := func(client string, sent time.Time) string {
			t.Helper()
			b := body(client, sent)
			s := signed{spec: v.spec(), secret: v.Secret, req: linearRequest(v.Secret, b, sent)}
			got := presetValuesOf(t, s, nil)
			if got.ID == signature.BodyDigest(b) || !strings.HasPrefix(got.ID, "sha256:") {
				t.Errorf("id = %q, want the digest of the body without webhookTimestamp", got.ID)
			}
			return got.ID
		}
		first := time.Unix(1772366400, 0)
		// Linear stamps each delivery with the time it is sent: the retry's body differs
		// in webhookTimestamp only, and must not become a second event.
		if a, b := idOf("c1", first), idOf("c1", first.Add(30*time.Second)); a != b {
			t.Errorf("a retry sent 30 s later got id %q, the first delivery %q", b, a)
		}
		if a, b := idOf("c1", first), idOf("c2", first); a == b {
			t.Errorf("two events (other oauthClientId) share the id %q", a)
		}
	})
}

// TestLinearTimestamp covers the signed body timestamp: it bounds replays like a signed
// timestamp header, is read only after the MAC verified, and must be present.
func TestLinearTimestamp(t *testing.T) {
	v := vectorNamed(t, "linear-sdk")
	sent := time.UnixMilli(1677611643000)
	verifier := mustNew(t, v.spec(), signature.Secret{Value: v.Secret})

	t.Run("tolerance", func(t *testing.T) {
		expectDefaultTolerance(t, verifier, v, sent, time.Millisecond)
	})
	t.Run("Linear's one minute", func(t *testing.T) {
		expectSpecTolerance(t, v, sent, time.Minute)
	})
	t.Run("signed.timestamp is the body's time in seconds", func(t *testing.T) {
		verified, err := verifier.Open(v.request())
		if err != nil {
			t.Fatal(err)
		}
		if got := verified.Signed()[signature.SignedTimestamp]; got != "1677611643" {
			t.Fatalf("signed.timestamp = %q", got)
		}
	})
	t.Run("an unsigned change to the timestamp is a mismatch, not a fresh delivery", func(t *testing.T) {
		req := v.request()
		req.Now = sent.Add(24 * time.Hour)
		req.Body = []byte(strings.Replace(v.Body, "1677611643000", strconv.FormatInt(req.Now.UnixMilli(), 10), 1))
		expectReason(t, verifier.Verify(req), signature.ReasonMismatch, v)
	})

	now := time.Unix(v.Now, 0)
	ms := strconv.FormatInt(sent.UnixMilli(), 10)
	for _, tc := range []struct {
		name, body string
		want       signature.Reason
	}{
		{"no webhookTimestamp", `{"action":"create","type":"Issue","data":{"id":"i1"}}`, signature.ReasonMissingHeader},
		{"null webhookTimestamp", `{"type":"Issue","webhookTimestamp":null}`, signature.ReasonMissingHeader},
		{"a string", `{"type":"Issue","webhookTimestamp":"` + ms + `"}`, signature.ReasonMalformedHeader},
		{"an exponent", `{"type":"Issue","webhookTimestamp":1.677611643e12}`, signature.ReasonMalformedHeader},
		{"a fraction", `{"type":"Issue","webhookTimestamp":` + ms + `.5}`, signature.ReasonMalformedHeader},
		{"negative", `{"type":"Issue","webhookTimestamp":-` + ms + `}`, signature.ReasonMalformedHeader},
		{"in seconds, not ms", `{"type":"Issue","webhookTimestamp":1677611643}`, signature.ReasonTimestampOutOfTolerance},
		{"twice", `{"webhookTimestamp":` + ms + `,"type":"Issue","webhookTimestamp":` + ms + `}`, signature.ReasonMalformedHeader},
		{"not JSON", `webhookTimestamp=` + ms, signature.ReasonMalformedHeader},
		{"an array", `[{"webhookTimestamp":` + ms + `}]`, signature.ReasonMalformedHeader},
		{"trailing data", `{"webhookTimestamp":` + ms + `} {}`, signature.ReasonMalformedHeader},
		{"well formed", `{"type":"Issue","webhookTimestamp":` + ms + `}`, ""},
	} {
		t.Run("correctly signed, "+tc.name, func(t *testing.T) {
			expectReason(t, verifier.Verify(linearRequest(v.Secret, []byte(tc.body), now)), tc.want, v)
		})
	}
}
