package provider

import (
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// Bitbucket signs only the body; the event key is an unsigned header, so it is bound into
// the id next to the body digest.
func TestBitbucketPresets(t *testing.T) {
	v := vectorNamed(t, "bitbucket-computed")
	s := vectorSigned(v)
	headers := map[string]string{
		"X-Event-Key": "pullrequest:created", "X-Request-UUID": "3a0c6b8e-5f3e-4f0b-9d5e-1c2b3a4d5e6f",
		"X-Hook-UUID": "{9d1b1c2e-3f4a-4b5c-8d6e-7f8091a2b3c4}", "X-Attempt-Number": "1",
	}
	digest := signature.BodyDigest([]byte(v.Body))
	want := presetValues{
		ID:         "pullrequest:created:" + digest,
		Type:       "pullrequest:created",
		EntityKey:  "https://bitbucket.org/acme/shop/pull-requests/42",
		OccurredAt: presetPtr(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)),
	}
	expectPresetValues(t, presetValuesOf(t, s, headers), want)

	// A retry or a replay under another request id is the same event.
	headers["X-Request-UUID"], headers["X-Attempt-Number"] = "0f0e0d0c-0b0a-4909-8807-060504030201", "2"
	expectPresetValues(t, presetValuesOf(t, s, headers), want)

	// The same body under another event key is another event of that type: guard
	// transitions on signed body fields (event.body.pullrequest.state).
	headers["X-Event-Key"] = "pullrequest:fulfilled"
	want.ID, want.Type = "pullrequest:fulfilled:"+digest, "pullrequest:fulfilled"
	expectPresetValues(t, presetValuesOf(t, s, headers), want)
}
