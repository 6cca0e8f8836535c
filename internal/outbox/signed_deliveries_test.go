package outbox

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// verifyStandardWebhook is a sink's verifier written from the Standard Webhooks spec
// alone: the whsec_ secret is base64 after its prefix; the signed content is
// "<webhook-id>.<webhook-timestamp>.<raw body>"; webhook-signature is a space-separated
// list of "v1,<base64 HMAC-SHA256>", one of which must match; the timestamp (Unix
// seconds) must be within 5 minutes of now.
func verifyStandardWebhook(secret string, h http.Header, body []byte, now time.Time) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return err
	}
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return errors.New("missing Standard Webhooks header")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errors.New("webhook-timestamp is not integer seconds")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return errors.New("webhook-timestamp outside tolerance")
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, s := range strings.Fields(sigs) {
		version, enc, ok := strings.Cut(s, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(enc)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return errors.New("no matching v1 signature")
}

// A sink that verifies with its own Standard Webhooks code and dedupes on the key sees,
// for every attempt and for the re-drive of a dead letter: a valid signature, the same
// webhook-id, Idempotency-Key and envelope id for one row (and the same body bytes), and
// different keys for different rows. Existing tests check one signed attempt
// (TestDeliveryEnvelopeAndSignature) and the key of a re-drive, not the signature and
// body of retries and re-drives.
func TestSignedKeysStableAcrossRetriesAndRedrive(t *testing.T) {
	db := newTestDB(t)
	ids := db.insert(t, outboxRow{Entity: "ord_1", Seq: 0}, outboxRow{Entity: "ord_2", Seq: 0}, outboxRow{Entity: "ord_3", Seq: 0})
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("sink-test-key-0123456789abcdef"))
	var mu sync.Mutex
	redriven := false
	s := newSink(t, nil)
	var ord2 int
	s.respond = func(a arrival, _ int) int {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case a.Entity == "ord_1" && !redriven:
			return http.StatusInternalServerError
		case a.Entity == "ord_2":
			ord2++
			if ord2 < 3 {
				return http.StatusConflict
			}
		}
		return http.StatusOK
	}
	opts := db.options(t, s.srv.URL)
	opts.SigningKey = secret
	opts.MaxAttempts = 3
	start(t, db.pool, opts)
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "ord_1 dead, others delivered", func() bool {
		return db.state(t, ids[0]).Dead && db.state(t, ids[1]).Delivered && db.state(t, ids[2]).Delivered
	})
	mu.Lock()
	redriven = true
	mu.Unlock()
	if _, err := RedriveDeadLetters(context.Background(), db.pool, db.tables, Selection{Endpoint: testEndpoint}, ReplayOptions{}); err != nil {
		t.Fatalf("redrive: %v", err)
	}
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "re-driven row delivered", func() bool { return db.state(t, ids[0]).Delivered })

	arr := s.snapshot()
	keyOf := map[string]string{}
	bodyOf := map[string][]byte{}
	for i, a := range arr {
		if err := verifyStandardWebhook(secret, a.Header, a.Body, a.At); err != nil {
			t.Errorf("arrival %d (%s): %v", i, a.Entity, err)
		}
		id := a.Header.Get("webhook-id")
		if a.Key != id || a.Envelope.ID != id {
			t.Errorf("arrival %d (%s): Idempotency-Key %q, webhook-id %q, envelope id %q differ", i, a.Entity, a.Key, id, a.Envelope.ID)
		}
		if k, ok := keyOf[a.Entity]; ok && k != id {
			t.Errorf("%s: key changed from %q to %q", a.Entity, k, id)
		}
		keyOf[a.Entity] = id
		if b, ok := bodyOf[a.Entity]; ok && !bytes.Equal(b, a.Body) {
			t.Errorf("%s: body changed between attempts:\n%s\n%s", a.Entity, b, a.Body)
		}
		bodyOf[a.Entity] = a.Body
	}
	if len(arr) != 3+3+1+1 {
		t.Errorf("sink saw %d requests, want 3 (ord_1) + 1 (re-drive) + 3 (ord_2) + 1 (ord_3)", len(arr))
	}
	seen := map[string]string{}
	for e, k := range keyOf {
		if other, ok := seen[k]; ok {
			t.Errorf("%s and %s share key %q", e, other, k)
		}
		seen[k] = e
	}
}

// The body is the envelope; the headers carry the Idempotency-Key and a Standard
// Webhooks signature the sink can verify with the shared key.
func TestDeliveryEnvelopeAndSignature(t *testing.T) {
	db := newTestDB(t)
	rawKey := []byte("0123456789abcdef0123456789abcdef")
	whsec := "whsec_" + base64.StdEncoding.EncodeToString(rawKey)
	ids := db.insert(t, outboxRow{Entity: "ord_1", Seq: 7})
	s := newSink(t, nil)
	opts := db.options(t, s.srv.URL)
	opts.SigningKey = whsec
	start(t, db.pool, opts)
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "delivery", func() bool { return db.state(t, ids[0]).Delivered })

	a := s.snapshot()[0]
	want := outboxRow{Entity: "ord_1", Seq: 7}.key()
	if a.Key != want || a.Header.Get(HeaderWebhookID) != want {
		t.Errorf("Idempotency-Key %q, webhook-id %q, want %q", a.Key, a.Header.Get(HeaderWebhookID), want)
	}
	if ct := a.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	env := a.Envelope
	if env.ID != want || env.Type != "order.paid" || env.Endpoint != testEndpoint || env.EntityKey != "ord_1" ||
		env.SourceEventID != want || env.OccurredAt == nil || !env.OccurredAt.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) ||
		env.CreatedAt.IsZero() || a.Seq != 7 {
		t.Errorf("envelope %+v", env)
	}
	ts := a.Header.Get(HeaderWebhookTimestamp)
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || time.Since(time.Unix(sec, 0)).Abs() > time.Minute {
		t.Errorf("webhook-timestamp %q", ts)
	}
	mac := hmac.New(sha256.New, rawKey)
	fmt.Fprintf(mac, "%s.%s.%s", want, ts, a.Body)
	wantSig := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	if got := a.Header.Get(HeaderWebhookSignature); !hmac.Equal([]byte(got), []byte(wantSig)) {
		t.Errorf("webhook-signature %q, want %q", got, wantSig)
	}
	if st := db.state(t, ids[0]); !st.Delivered || st.Attempts != 1 || st.Leased {
		t.Errorf("row after delivery: %+v", st)
	}
}
