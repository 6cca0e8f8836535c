package receiver_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/retention"
	"github.com/hookkeeper/hookkeeper/internal/store"
)

// pruneAsOf runs the endpoint's retention (its defaulted spec.retention) as if the
// clock read now+ahead, and returns the report.
func (f *fixture) pruneAsOf(ahead time.Duration) retention.Report {
	f.t.Helper()
	rep, err := retention.Prune(context.Background(), f.pool, retention.Options{
		Endpoint: f.ep.Key(), Tables: store.TablesIn(schema), Policy: retention.PolicyOf(f.ep), Pause: -1,
		Now: func() time.Time { return time.Now().Add(ahead) },
	})
	if err != nil {
		f.t.Fatalf("prune: %v", err)
	}
	return rep
}

// TestRedeliveryAfterPayloadPruningIsADuplicate is issue 18's retention bar as a
// provider (or an attacker with a captured request) replays it: Adyen and GitHub sign
// no timestamp, so a months-old delivery still verifies. Once retention removed the
// receipt's payload (payloadFor, default 30 days) the dedupe record remains: the
// replay is acknowledged as a duplicate and changes nothing.
func TestRedeliveryAfterPayloadPruningIsADuplicate(t *testing.T) {
	adyenBody := []byte(`{"live":"false","notificationItems":[` + adyenItem(t, "PSP0001", "order-1", 1000) + `]}`)
	githubBody := []byte(`{"action":"closed","pull_request":{"html_url":"https://github.com/o/r/pull/1","merged":true},"repository":{"full_name":"o/r"}}`)
	for _, c := range []struct {
		provider  v1alpha1.ProviderType
		body      []byte
		header    func(t *testing.T) http.Header
		duplicate func(r response) bool
	}{
		{v1alpha1.ProviderAdyen, adyenBody,
			func(*testing.T) http.Header { return http.Header{"Content-Type": {"application/json"}} },
			func(r response) bool { return r.code == http.StatusOK && r.body == "[accepted]" }},
		{v1alpha1.ProviderGitHub, githubBody,
			func(t *testing.T) http.Header { return githubHeader(t, githubBody, "d-1", "pull_request") },
			func(r response) bool { return r.code == http.StatusOK && strings.Contains(r.body, `"duplicate":true`) }},
	} {
		t.Run(string(c.provider), func(t *testing.T) {
			f := newFixture(t, fixtureOptions{provider: c.provider})
			if r := f.post("/hooks", c.body, c.header(t)); r.code != http.StatusOK {
				t.Fatalf("first delivery: %d %q", r.code, r.body)
			}
			before := f.rowCounts()
			if before["events"] != 1 {
				t.Fatalf("after the first delivery: %v, want one receipt", before)
			}

			// 31 days later the payload is gone, the dedupe record is not.
			if rep := f.pruneAsOf(31 * 24 * time.Hour); rep.Payloads != 1 || rep.Receipts != 0 {
				t.Fatalf("prune after 31 days: %+v, want the payload removed and the record kept", rep)
			}
			if n := f.rows().Count(t, store.TablesIn(schema).Events, "payload IS NULL AND headers IS NULL"); n != 1 {
				t.Fatalf("receipts without payload and headers: %d, want 1", n)
			}

			r := f.post("/hooks", c.body, c.header(t))
			if !c.duplicate(r) {
				t.Errorf("redelivery after pruning: %d %q, want a duplicate", r.code, r.body)
			}
			if after := f.rowCounts(); after["events"] != before["events"] || after["outbox"] != before["outbox"] {
				t.Errorf("rows after the redelivery %v, want unchanged %v", after, before)
			}
		})
	}
}
