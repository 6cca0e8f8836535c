package provider

import (
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hookkeeper/hookkeeper/internal/signature"
)

const (
	twitchIDHeader        = "Twitch-Eventsub-Message-Id"
	twitchTimestampHeader = "Twitch-Eventsub-Message-Timestamp"
	twitchSignatureHeader = "Twitch-Eventsub-Message-Signature"
)

func TestTwitchEventSubChallenge(t *testing.T) {
	p, _ := Lookup(ProviderTwitchEventSub)
	v := vectorNamed(t, "twitcheventsub-verification-computed")

	res := expectAnswered(t, p, openVector(t, v), "webhook_callback_verification")
	if res.Status != http.StatusOK || res.ContentType != "text/plain" || string(res.Body) != "pogchamp-kappa-360noscope-vohiyo" {
		t.Fatalf("answer %d %q %q", res.Status, res.ContentType, res.Body)
	}

	expectForgeriesUnanswered(t, p, v, "challenge", map[string]func(*signature.Request){
		"unsigned":      func(r *signature.Request) { r.Header.Del(twitchSignatureHeader) },
		"bad signature": v.tamperSignature,
		"other secret": func(r *signature.Request) {
			r.Header.Set(twitchSignatureHeader, twitchSign("an attacker's eventsub secret", r.Header.Get(twitchIDHeader), r.Header.Get(twitchTimestampHeader), r.Body))
		},
		"changed challenge": v.tamperBody,
		"replayed later":    func(r *signature.Request) { r.Now = r.Now.Add(time.Hour) },
	})

	// Notifications and revocations are events, whatever the unsigned message type says.
	for _, name := range []string{"twitcheventsub-notification-computed", "twitcheventsub-revocation-computed"} {
		verified := openVector(t, vectorNamed(t, name))
		if _, ok := p.Handshake(verified, http.Header{"Twitch-Eventsub-Message-Type": {"webhook_callback_verification"}}); ok {
			t.Fatalf("%s was answered as a challenge", name)
		}
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
	for _, tc := range []struct {
		name string
		now  time.Time
		want signature.Reason
	}{
		{"at the signed time", signedAt, ""},
		{"at the edge of the tolerance", signedAt.Add(5 * time.Minute), ""},
		{"just past it", signedAt.Add(5*time.Minute + time.Nanosecond), signature.ReasonTimestampOutOfTolerance},
		{"before a future timestamp's tolerance", signedAt.Add(-5*time.Minute - time.Nanosecond), signature.ReasonTimestampOutOfTolerance},
	} {
		req := v.request()
		req.Now = tc.now
		if got := signature.ReasonOf(verifier.Verify(req)); got != tc.want {
			t.Errorf("%s: want %q, got %q", tc.name, tc.want, got)
		}
	}
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

// TestTwitchEventSubPresets: a revocation without a broadcaster (the vectors' events are
// rows of TestPresetsOverVectors).
func TestTwitchEventSubPresets(t *testing.T) {
	p, _ := Lookup(ProviderTwitchEventSub)
	// A subscription without a broadcaster (user.update) is its own entity.
	vals := evaluatePresets(t, p,
		[]byte(`{"subscription":{"id":"sub-1","status":"user_removed","type":"user.update","condition":{"user_id":"42"}}}`), nil,
		map[string]string{signature.SignedID: "m-1", signature.SignedTimestamp: "1767225600"})
	if got := presetString(t, vals, "entityKey"); got != "sub-1" {
		t.Errorf("entityKey %q", got)
	}
	if got := presetString(t, vals, "type"); got != "revocation.user_removed" {
		t.Errorf("type %q", got)
	}
}
