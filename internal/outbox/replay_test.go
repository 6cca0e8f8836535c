package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/receipt"
)

// An unmatched receipt is re-run through the real receipt transaction once its entity
// exists: it applies and writes one outbox row; a dry run before changes nothing and a
// second run selects nothing.
func TestReplayReceipts(t *testing.T) {
	db := newTestDB(t)
	ctx := context.Background()
	ref := func(name string) corev1.SecretKeySelector {
		return corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: "k"}
	}
	we := &v1alpha1.WebhookEndpoint{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop"},
		Spec: v1alpha1.WebhookEndpointSpec{
			Provider:       v1alpha1.ProviderSpec{Type: v1alpha1.ProviderStripe},
			SigningSecrets: []v1alpha1.SigningSecret{{SecretKeyRef: ref("s")}},
			Database:       v1alpha1.DatabaseSpec{URLSecretRef: ref("db"), Schema: testSchema},
			Entity:         v1alpha1.EntitySpec{OnUnmatched: v1alpha1.UnmatchedRecord},
			StateMachine: v1alpha1.StateMachineSpec{
				Initial: "payment_pending",
				States:  []string{"payment_pending", "paid"},
				Transitions: []v1alpha1.Transition{{Name: "capture", On: []string{"payment_intent.succeeded"},
					From: []string{"payment_pending"}, To: "paid", Emit: "order.paid"}},
			},
			Delivery: v1alpha1.DeliverySpec{Sink: v1alpha1.SinkSpec{URL: "http://sink.local/"}},
		},
	}
	env := map[string]string{config.EnvDatabaseURL: db.url, config.EnvSigningSecretPrefix + "0": "whsec_dGVzdA=="}
	ep, err := config.Compile(we, func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("compile endpoint: %v", err)
	}
	if ep.Key() != testEndpoint {
		t.Fatalf("endpoint key %q", ep.Key())
	}
	rec := receipt.NewRecorder(db.pool, ep)
	amount := int64(300)
	var receiptIDs []int64
	for i := range 3 {
		res, err := rec.Record(ctx, receipt.Event{
			ID: fmt.Sprintf("evt_%d", i), Type: "payment_intent.succeeded", EntityKey: fmt.Sprintf("order-%d", i),
			Amount: &amount, Payload: json.RawMessage(`{"id":"evt"}`),
		})
		if err != nil || res.Outcome != receipt.OutcomeUnmatched {
			t.Fatalf("record: %+v, %v", res, err)
		}
		receiptIDs = append(receiptIDs, res.ReceiptID)
	}
	calls := 0
	reprocess := func(ctx context.Context, id int64) error {
		calls++
		_, err := rec.Reprocess(ctx, id)
		return err
	}
	sel := Selection{Endpoint: testEndpoint, Since: time.Now().Add(-time.Hour)}

	var listed []ReplayItem
	rep, err := ReplayReceipts(ctx, db.pool, db.tables, sel, nil, ReplayOptions{DryRun: true, Each: func(it ReplayItem) { listed = append(listed, it) }})
	if err != nil || rep.Selected != 3 || rep.Replayed != 0 || len(listed) != 3 || listed[0].State != "unmatched" {
		t.Fatalf("dry run: %+v, %v, listed %+v", rep, err, listed)
	}
	if n := db.count(t, "true"); n != 0 {
		t.Fatalf("dry run wrote %d outbox rows", n)
	}

	// Two of the three orders now exist.
	for _, key := range []string{"order-0", "order-2"} {
		if _, err := db.pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (endpoint, entity_key, state, amount) VALUES ($1, $2, 'payment_pending', 300)`,
			db.tables.Entities), testEndpoint, key); err != nil {
			t.Fatal(err)
		}
	}
	var progress []string
	rep, err = ReplayReceipts(ctx, db.pool, db.tables, sel, reprocess, ReplayOptions{BatchSize: 2,
		Progress: func(done, total int) { progress = append(progress, fmt.Sprintf("%d/%d", done, total)) }})
	if err != nil || rep.Selected != 3 || rep.Replayed != 3 || rep.Outcomes["applied"] != 2 || rep.Outcomes["unmatched"] != 1 {
		t.Fatalf("replay: %+v, %v", rep, err)
	}
	if fmt.Sprint(progress) != "[2/3 3/3]" {
		t.Errorf("progress %v", progress)
	}
	if n := db.count(t, "event_type = 'order.paid'"); n != 2 {
		t.Errorf("%d outbox rows, want 2", n)
	}

	// Again: only the still-unmatched receipt is selected, and nothing new is written.
	calls = 0
	rep, err = ReplayReceipts(ctx, db.pool, db.tables, sel, reprocess, ReplayOptions{})
	if err != nil || rep.Selected != 1 || calls != 1 || rep.Outcomes["unmatched"] != 1 {
		t.Errorf("second replay: %+v, %v, %d calls", rep, err, calls)
	}
	if n := db.count(t, "true"); n != 2 {
		t.Errorf("second replay changed the outbox: %d rows", n)
	}
	// By id, outside the time range: nothing.
	rep, err = ReplayReceipts(ctx, db.pool, db.tables, Selection{Endpoint: testEndpoint, IDs: receiptIDs[1:2], Until: time.Now().Add(-time.Hour)}, reprocess, ReplayOptions{})
	if err != nil || rep.Selected != 0 {
		t.Errorf("replay outside the range: %+v, %v", rep, err)
	}
}
