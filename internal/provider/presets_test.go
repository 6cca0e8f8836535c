package provider

import (
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// bodyDigestID and signedDigestID stand in a row's want.ID for the id a provider without
// an event id reads: the digest of the vector's signed body, or the signed digest (of
// the signed text, where that is not the body).
const (
	bodyDigestID   = "(the digest of the signed body)"
	signedDigestID = "(the signed digest)"
)

// TestPresetsOverVectors: what a provider's presets read from the one event of a
// vector; what else a provider's presets read is in the provider's own tests below or in
// its _test.go. replay are unsigned headers a replay may carry with other values: they
// change nothing the presets read. idHeader names the signed header of the vector whose
// value the id is.
func TestPresetsOverVectors(t *testing.T) {
	for _, tc := range []struct {
		vector   string
		idHeader string
		replay   map[string]string
		want     presetValues
	}{
		{vector: "intercom-computed", want: presetValues{
			ID: "notif_78c122d0-23ba-11e4-9464-79b01267cc2e", Type: "conversation.user.created", EntityKey: "147",
			OccurredAt: presetPtr(time.Unix(1772366401, 0)),
		}},
		// Vercel's createdAt is in milliseconds; the preset turns it into seconds.
		{vector: "vercel-computed", want: presetValues{
			ID: "uQ6c2a8ZSeKMcbWAaKTwZLsH", Type: "deployment.succeeded", EntityKey: "dpl_2qDB8PqGKhnyUFCiVLwLiL5dJGzD",
			OccurredAt: presetPtr(time.Unix(1772366400, 0)),
		}},
		{vector: "typeform-computed", want: presetValues{
			ID: "01KJMB6Y6N3Q8Z1T5V7W9X2Y4Z", Type: "form_response", EntityKey: "a3a12ec67a1365927098a606107fac15",
			OccurredAt: presetPtr(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)),
		}},
		// Paystack's envelope has no event id and no header is signed: the id is the
		// digest of the signed body, whatever headers a replay carries.
		{vector: "paystack-computed", replay: map[string]string{"x-request-id": "replayed"}, want: presetValues{
			ID: bodyDigestID, Type: "charge.success", EntityKey: "uybxnzf71231",
			Amount: presetPtr[int64](1000), OccurredAt: presetPtr(time.Date(2025, 6, 21, 11, 11, 27, 0, time.UTC)),
		}},
		// Razorpay signs nothing but the body and its body has no event id: the id is the
		// body digest, so a replay under another (unsigned) X-Razorpay-Event-Id is a
		// duplicate.
		{vector: "razorpay-sdk-python", replay: map[string]string{"x-razorpay-event-id": "EvReplay0000000001"}, want: presetValues{
			ID: bodyDigestID, Type: "payment.authorized", EntityKey: "order_100000000order",
			Amount: presetPtr[int64](1000000), OccurredAt: presetPtr(time.Unix(1400826760, 0)),
		}},
		// The Netbanking payment.captured sample of Razorpay's docs, as the SDK-checked
		// vector.
		{vector: "razorpay-sdk-go", want: presetValues{
			ID: bodyDigestID, Type: "payment.captured", EntityKey: "order_DESlLckIVRkHWj",
			Amount: presetPtr[int64](100), OccurredAt: presetPtr(time.Unix(1567674606, 0)),
		}},
		// svix-id is signed: the id is the one that verified, and a changed svix-id does not
		// verify at all (the vector suite's "id" case), so a replay cannot become new.
		{vector: "clerk-svix-go", idHeader: "svix-id", want: presetValues{
			Type: "user.created", EntityKey: "user_29w83sxmDNGwOuEthce5gg56FcC",
			OccurredAt: presetPtr(time.Unix(1654012591, 0)), // timestamp 1654012591835 ms
		}},
		{vector: "resend-svix-go", idHeader: "svix-id", want: presetValues{
			Type: "email.delivered", EntityKey: "56761188-7520-42d8-8898-ff6fc54ce618",
			OccurredAt: presetPtr(time.Date(2024, 2, 22, 23, 41, 12, 126e6, time.UTC)),
		}},
		{vector: "discord-event-computed", want: presetValues{
			ID: bodyDigestID, Type: "APPLICATION_AUTHORIZED", EntityKey: "111178765189277770",
			OccurredAt: presetPtr(time.Date(2025, 12, 31, 23, 59, 58, 64834000, time.UTC)),
		}},
		{vector: "zoom-computed", want: presetValues{
			ID: bodyDigestID, Type: "meeting.started", EntityKey: "4444AAAiAAAAAiAiAiiAii==",
			OccurredAt: presetPtr(time.Unix(1767225599, 0)),
		}},
		{vector: "twitcheventsub-notification-computed", idHeader: "Twitch-Eventsub-Message-Id", want: presetValues{
			Type: "stream.online", EntityKey: "1337", OccurredAt: presetPtr(time.Unix(1767225600, 0)),
		}},
		{vector: "twitcheventsub-revocation-computed", idHeader: "Twitch-Eventsub-Message-Id", want: presetValues{
			Type: "revocation.authorization_revoked", EntityKey: "1337", OccurredAt: presetPtr(time.Unix(1767225600, 0)),
		}},
		// Twilio's id is the digest of the signed text (the URL's fields, sorted), not of the
		// body's bytes.
		{vector: "twilio-sdk-message-status", want: presetValues{
			ID: signedDigestID, Type: "message.delivered", EntityKey: "SM1f0e2d3c4b5a69788796a5b4c3d2e1f0",
		}},
		{vector: "twilio-sdk-call-status", want: presetValues{
			ID: signedDigestID, Type: "call.completed", EntityKey: "CA9f8e7d6c5b4a39281706f5e4d3c2b1a0",
		}},
	} {
		t.Run(tc.vector, func(t *testing.T) {
			v := vectorNamed(t, tc.vector)
			got, verified := presetsOfSigned(t, vectorSigned(v), nil)
			want := tc.want
			switch {
			case tc.idHeader != "":
				want.ID = v.Headers[tc.idHeader]
			case want.ID == bodyDigestID:
				want.ID = signature.BodyDigest([]byte(v.Body))
			case want.ID == signedDigestID:
				want.ID = verified.Signed()[signature.SignedDigest]
			}
			expectPresetValues(t, got.values(t), want)
			if tc.replay != nil {
				expectPresetValues(t, presetsOverSignedVector(t, tc.vector, tc.replay), want)
			}
		})
	}
}

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

// TestResendPresets: Resend's events without an email (its email.delivered vector is a
// row of TestPresetsOverVectors).
func TestResendPresets(t *testing.T) {
	// contact.* and domain.* events carry no email_id; the entity is data.id.
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	contact := svixSigner(ProviderResend)(t, []byte(`{"type":"contact.created","created_at":"2026-03-01T12:00:00.000Z",`+
		`"data":{"id":"e169aa45-1ecf-4183-9955-b1499d5701d3","audience_id":"78261eea-8f8b-4381-83c6-79fa7120f1cf",`+
		`"created_at":"2026-03-01T12:00:00.000Z","email":"steve.wozniak@gmail.com","unsubscribed":false}}`), now)
	expectPresetValues(t, presetValuesOf(t, contact, nil), presetValues{
		ID:         fuzzID,
		Type:       "contact.created",
		EntityKey:  "e169aa45-1ecf-4183-9955-b1499d5701d3",
		OccurredAt: presetPtr(now),
	})
}

// TestDiscordPresets: the other shapes of Discord's events (the signed vector's event is
// a row of TestPresetsOverVectors).
func TestDiscordPresets(t *testing.T) {
	p, _ := Lookup(ProviderDiscord)
	digest := map[string]string{signature.SignedDigest: "sha256:00"}
	entitlement := evaluatePresets(t, p, []byte(`{"version":1,"application_id":"1","type":1,"event":{"type":"ENTITLEMENT_CREATE","timestamp":"2024-10-18T18:41:21.109604+00:00","data":{"id":"1234505980407808808","user_id":"111178765189277770","sku_id":"1"}}}`), nil, digest)
	if got := presetString(t, entitlement, "entityKey"); got != "111178765189277770" {
		t.Errorf("entitlement entityKey %q", got)
	}
	if got := presetTime(t, entitlement, "occurredAt"); !got.Equal(time.Date(2024, 10, 18, 18, 41, 21, 109604000, time.UTC)) {
		t.Errorf("an offset timestamp: %s", got)
	}
	message := evaluatePresets(t, p, []byte(`{"version":1,"application_id":"1","type":1,"event":{"type":"LOBBY_MESSAGE_DELETE","timestamp":"2025-08-05T21:44:09.412957","data":{"id":"1402406637632884857","lobby_id":"1402399883394285659"}}}`), nil, digest)
	if got := presetString(t, message, "entityKey"); got != "1402406637632884857" {
		t.Errorf("message entityKey %q", got)
	}
}

// TestZoomPresets: the signed timestamp reaches the presets, and a user event's entity
// (the signed vector's event is a row of TestPresetsOverVectors).
func TestZoomPresets(t *testing.T) {
	p, _ := Lookup(ProviderZoom)
	_, verified := presetsOfSigned(t, vectorSigned(vectorNamed(t, "zoom-computed")), nil)
	if _, ok := verified.Signed()[signature.SignedTimestamp]; !ok {
		t.Error("the signed timestamp is not in signed")
	}

	// A user event has no uuid: the entity is the object id.
	user := evaluatePresets(t, p, []byte(`{"event":"user.updated","event_ts":1767225599000,"payload":{"account_id":"A","object":{"id":"KDcuGIm1QgePTO8WbOqwIQ"}}}`), nil,
		map[string]string{signature.SignedDigest: "sha256:00"})
	if got := presetString(t, user, "entityKey"); got != "KDcuGIm1QgePTO8WbOqwIQ" {
		t.Errorf("user entityKey %q", got)
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
