package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// TestLocalDemo runs the demo without a cluster (RunLocal) on a database of its own
// and reads its table: every scripted case ends as it must, refund-before-capture
// included, and each effect reaches the sink once.
func TestLocalDemo(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	err := RunLocal(ctx, LocalOptions{
		RepoRoot:    testsupport.RepoRoot(t),
		DatabaseURL: testsupport.NewDatabase(t),
		Out:         &out,
		Log:         testr.New(t),
	})
	if err != nil {
		t.Fatalf("local demo: %v\n%s", err, out.String())
	}
	rows := map[string]string{}
	for line := range strings.SplitSeq(out.String(), "\n") {
		for _, step := range []string{"first delivery", "duplicate", "32 concurrent duplicates", "out of order: refund first",
			"out of order: capture after", "bad signature", "amount mismatch"} {
			if strings.HasPrefix(line, step+"  ") {
				rows[step] = strings.Join(strings.Fields(line), " ")
			}
		}
	}
	want := map[string][]string{
		"first delivery":              {"200 applied (1 receipt)", "order-1001: paid", "1/1 delivered, sink got 1"},
		"duplicate":                   {"200 duplicate, no effect (still 1 receipt: applied)", "1/1 delivered, sink got 1"},
		"32 concurrent duplicates":    {"32x 200 applied (1 receipt)", "order-1002: paid", "1/1 delivered, sink got 1"},
		"out of order: refund first":  {"200 parked (1 receipt)", "order-1003: payment_pending", "0 rows"},
		"out of order: capture after": {"order-1003: refunded", "2 rows: order.paid, order.refunded", "2/2 delivered, sink got 2"},
		"bad signature":               {"401 not stored", "order-1004: payment_pending"},
		"amount mismatch":             {"200 guard_failed (1 receipt)", "order-1004: payment_pending", "0 rows"},
	}
	for step, parts := range want {
		row, ok := rows[step]
		if !ok {
			t.Errorf("no row for %q in:\n%s", step, out.String())
			continue
		}
		for _, p := range parts {
			if !strings.Contains(row, p) {
				t.Errorf("%q: row %q lacks %q", step, row, p)
			}
		}
	}
}

func TestMain(m *testing.M) { testsupport.Main(m) }
