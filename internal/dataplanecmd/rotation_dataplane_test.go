package dataplanecmd_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/demo"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

const (
	rotationOldSecret = "whsec_rotation_old_secret"
	rotationNewSecret = "whsec_rotation_new_secret"
)

func rotationV1(secret string, body []byte, ts string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	return hex.EncodeToString(mac.Sum(nil))
}

// rotationPost posts body with a Stripe-Signature carrying one v1 per secret (Stripe's
// header during a roll's overlap) and returns the status.
func rotationPost(t *testing.T, url string, body []byte, secrets ...string) int {
	t.Helper()
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	h := "t=" + ts
	for _, s := range secrets {
		h += ",v1=" + rotationV1(s, body, ts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", h)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// docs/rotation.md, Stripe: the new secret is added at index 0, the old one gets
// expiresAt. "Deliveries verify with either secret now", and "an expired key stops
// verifying at that exact time even before the pods roll". A real receiver on
// PostgreSQL: the old key verifies until expiresAt and not after it; the new key
// throughout; Stripe's overlap header (one v1 per secret) throughout; nothing signed
// with a key that was active is lost, nothing signed only with the expired key is
// recorded.
func TestRotationOldSecretStopsAtExpiresAtNewOneKeepsVerifying(t *testing.T) {
	dbURL := testsupport.MigratedDatabase(t, "hookkeeper")
	expires := time.Now().Truncate(time.Second).Add(10 * time.Second)
	manifest := ordersManifest("rotation",
		fmt.Sprintf(`[{secretKeyRef: {name: stripe-webhook-2, key: current}}, {secretKeyRef: {name: stripe-webhook, key: current}, expiresAt: %q}]`,
			expires.UTC().Format(time.RFC3339)),
		`{sink: {url: "http://127.0.0.1:9/"}}`)
	rr := serveManifest(t, manifest, map[string]string{
		config.EnvDatabaseURL:               dbURL,
		config.EnvSigningSecretPrefix + "0": rotationNewSecret,
		config.EnvSigningSecretPrefix + "1": rotationOldSecret,
	}, false)
	if time.Until(expires) < 3*time.Second {
		t.Skipf("the receiver took too long to start; %s left before expiresAt", time.Until(expires))
	}
	url := rr.url

	type sent struct {
		id           string
		keys         string
		start, end   time.Time
		status       int
		shouldRecord bool
	}
	var all []sent
	n := 0
	send := func(keys string, secrets ...string) sent {
		n++
		id := fmt.Sprintf("evt_rot_%s_%d", keys, n)
		body := demo.StripeEvent(id, "payment_intent.succeeded", fmt.Sprintf("order-%d", n), 4200, time.Now())
		s := sent{id: id, keys: keys, start: time.Now()}
		s.status = rotationPost(t, url, body, secrets...)
		s.end = time.Now()
		all = append(all, s)
		return s
	}
	deadline := expires.Add(3 * time.Second)
	pace := time.NewTicker(100 * time.Millisecond) // the client's send rate
	defer pace.Stop()
	for time.Now().Before(deadline) {
		send("old", rotationOldSecret)
		send("new", rotationNewSecret)
		send("both", rotationNewSecret, rotationOldSecret)
		<-pace.C
	}
	for i := range all {
		s := &all[i]
		switch s.keys {
		case "new", "both":
			s.shouldRecord = true
			if s.status != http.StatusOK {
				t.Errorf("%s signed with the new key (%s): %d at %s, want 200", s.id, s.keys, s.status, s.start.Format(time.RFC3339Nano))
			}
		case "old":
			switch {
			case s.end.Before(expires):
				s.shouldRecord = true
				if s.status != http.StatusOK {
					t.Errorf("%s signed with the old key before its expiresAt (%s, answered %s): %d, want 200",
						s.id, expires.Format(time.RFC3339), s.end.Format(time.RFC3339Nano), s.status)
				}
			case !s.start.Before(expires):
				if s.status == http.StatusOK {
					t.Errorf("%s signed only with the expired key (sent %s, expiresAt %s) was accepted",
						s.id, s.start.Format(time.RFC3339Nano), expires.Format(time.RFC3339))
				}
			default:
				s.shouldRecord = s.status == http.StatusOK
			}
		}
	}
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, s := range all {
		var got int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM hookkeeper.webhook_events WHERE event_id = $1`, s.id).Scan(&got); err != nil {
			t.Fatal(err)
		}
		want := 0
		if s.shouldRecord {
			want = 1
		}
		if got != want {
			t.Errorf("%s (%s, status %d): %d receipt(s), want %d", s.id, s.keys, s.status, got, want)
		}
	}
	t.Logf("%d requests across the expiry at %s", len(all), expires.Format(time.RFC3339))
}
