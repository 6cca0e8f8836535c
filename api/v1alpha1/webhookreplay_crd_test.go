package v1alpha1_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/outbox"
	"github.com/hookkeeper/hookkeeper/internal/receipt"
)

func validReplay(name string) *v1alpha1.WebhookReplay {
	return &v1alpha1.WebhookReplay{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       v1alpha1.WebhookReplaySpec{EndpointRef: v1alpha1.EndpointReference{Name: "orders"}, DeadLetters: true},
	}
}

// Admission refuses a WebhookReplay that could not run, saying why.
func TestCRDRejectsInvalidReplays(t *testing.T) {
	c, ctx := newClient(t)
	hour := metav1.NewTime(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	earlier := metav1.NewTime(hour.Add(-time.Hour))
	cases := []struct {
		name   string
		mutate func(*v1alpha1.WebhookReplay)
		want   []string
	}{
		{"no endpoint", func(w *v1alpha1.WebhookReplay) { w.Spec.EndpointRef.Name = "" }, []string{"endpointRef.name"}},
		{"neither dead letters nor receipts", func(w *v1alpha1.WebhookReplay) { w.Spec.DeadLetters = false },
			[]string{"action Replay selects either deadLetters: true or receipts, exactly one"}},
		{"both dead letters and receipts", func(w *v1alpha1.WebhookReplay) { w.Spec.Receipts = &v1alpha1.ReceiptSelection{} },
			[]string{"exactly one"}},
		{"an outcome a replay cannot re-run", func(w *v1alpha1.WebhookReplay) {
			w.Spec.DeadLetters = false
			w.Spec.Receipts = &v1alpha1.ReceiptSelection{Outcomes: []v1alpha1.ReplayOutcome{"applied"}}
		}, []string{"Unsupported value", "applied"}},
		{"an unknown action", func(w *v1alpha1.WebhookReplay) { w.Spec.Action = "Delete" }, []string{"Unsupported value", "Delete"}},
		{"discard without a reason", func(w *v1alpha1.WebhookReplay) { w.Spec.Action = v1alpha1.ReplayActionDiscard },
			[]string{"reason is required with actions Discard and Erase"}},
		{"discard with a blank reason", func(w *v1alpha1.WebhookReplay) {
			w.Spec.Action, w.Spec.Reason = v1alpha1.ReplayActionDiscard, "   "
		}, []string{"reason is required"}},
		{"discard of receipts", func(w *v1alpha1.WebhookReplay) {
			w.Spec.Action, w.Spec.Reason = v1alpha1.ReplayActionDiscard, "why"
			w.Spec.DeadLetters, w.Spec.Receipts = false, &v1alpha1.ReceiptSelection{}
		}, []string{"action Discard works on dead letters"}},
		{"erase without an entity key", func(w *v1alpha1.WebhookReplay) {
			w.Spec.Action, w.Spec.Reason, w.Spec.DeadLetters = v1alpha1.ReplayActionErase, "gdpr", false
		}, []string{"entityKey is required with action Erase"}},
		{"erase with dead letters", func(w *v1alpha1.WebhookReplay) {
			w.Spec.Action, w.Spec.Reason, w.Spec.EntityKey = v1alpha1.ReplayActionErase, "gdpr", "order-1"
		}, []string{"action Erase selects by entityKey"}},
		{"erase since a time", func(w *v1alpha1.WebhookReplay) {
			w.Spec.Action, w.Spec.Reason, w.Spec.EntityKey, w.Spec.DeadLetters = v1alpha1.ReplayActionErase, "gdpr", "order-1", false
			w.Spec.Since = &earlier
		}, []string{"since and until do not apply"}},
		{"an entity key with Replay", func(w *v1alpha1.WebhookReplay) { w.Spec.EntityKey = "order-1" },
			[]string{"entityKey is required with action Erase, and applies only to it"}},
		{"since after until", func(w *v1alpha1.WebhookReplay) { w.Spec.Since, w.Spec.Until = &hour, &earlier },
			[]string{"since must be before until"}},
		{"a reason over the limit", func(w *v1alpha1.WebhookReplay) {
			w.Spec.Action, w.Spec.Reason = v1alpha1.ReplayActionDiscard, strings.Repeat("x", v1alpha1.MaxReplayReason+1)
		}, []string{"spec.reason", "may not be more than 1000"}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := validReplay("invalid-replay-" + string(rune('a'+i)))
			tc.mutate(w)
			refused(ctx, t, c, w, tc.want...)
		})
	}
}

// Valid replays of every action are admitted; the action defaults as
// WebhookReplaySpec.Default says.
func TestCRDAdmitsReplaysAndDefaultsTheAction(t *testing.T) {
	c, ctx := newClient(t)
	since := metav1.NewTime(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	cases := map[string]v1alpha1.WebhookReplaySpec{
		"dead letters": {DeadLetters: true, Since: &since, IDs: []int64{1, 2}, DryRun: true},
		"receipts":     {Receipts: &v1alpha1.ReceiptSelection{Outcomes: []v1alpha1.ReplayOutcome{"unmatched", "parked"}}},
		"all receipts": {Receipts: &v1alpha1.ReceiptSelection{}},
		"discard":      {Action: v1alpha1.ReplayActionDiscard, DeadLetters: true, Reason: "staging account"},
		"erase":        {Action: v1alpha1.ReplayActionErase, EntityKey: "order-1", Reason: "erasure request 42"},
	}
	i := 0
	for name, spec := range cases {
		t.Run(name, func(t *testing.T) {
			w := validReplay("valid-replay-" + string(rune('a'+i)))
			i++
			spec.EndpointRef = w.Spec.EndpointRef
			w.Spec = spec
			var got v1alpha1.WebhookReplay
			stored(ctx, t, c, w, &got)
			want := spec.DeepCopy()
			want.Default()
			// Semantic: a metav1.Time read back is in the local zone.
			if !equality.Semantic.DeepEqual(got.Spec, *want) {
				t.Errorf("the API server's defaults differ from WebhookReplaySpec.Default (-apiserver +go):\n%s", jsonDiff(t, got.Spec, *want))
			}
		})
	}
}

// The API server refuses any change of a WebhookReplay's spec, and allows labels.
func TestCRDReplaySpecIsImmutable(t *testing.T) {
	c, ctx := newClient(t)
	w := validReplay("immutable")
	admitted(ctx, t, c, w)
	for name, mutate := range map[string]func(*v1alpha1.WebhookReplay){
		"dryRun":   func(w *v1alpha1.WebhookReplay) { w.Spec.DryRun = true },
		"ids":      func(w *v1alpha1.WebhookReplay) { w.Spec.IDs = []int64{7} },
		"endpoint": func(w *v1alpha1.WebhookReplay) { w.Spec.EndpointRef.Name = "other" },
	} {
		cur := &v1alpha1.WebhookReplay{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(w), cur); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(cur.DeepCopy())
		mutate(cur)
		err := c.Patch(ctx, cur, patch)
		if err == nil || !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec is immutable") {
			t.Errorf("%s: want an Invalid error saying the spec is immutable, got %v", name, err)
		}
	}
	cur := &v1alpha1.WebhookReplay{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(w), cur); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Labels = map[string]string{"team": "payments"}
	if err := c.Patch(ctx, cur, patch); err != nil {
		t.Errorf("labelling a WebhookReplay: %v", err)
	}
}

// The CRD's limits and outcome enum are the Go ones: the reason fits a discard record,
// and the outcomes are exactly those receipt.Replayable accepts.
func TestReplayLimitsMatchTheCRD(t *testing.T) {
	if v1alpha1.MaxReplayReason != outbox.MaxDiscardReason {
		t.Errorf("MaxReplayReason %d, outbox.MaxDiscardReason %d", v1alpha1.MaxReplayReason, outbox.MaxDiscardReason)
	}
	field := crdSpec(t, "hookkeeper.dev_webhookreplays.yaml")
	checkLimits(t, field, []crdLimit{
		{"reason", "maxLength", int64(v1alpha1.MaxReplayReason)},
		{"ids", "maxItems", int64(v1alpha1.MaxReplayIDs)},
		{"entityKey", "maxLength", int64(v1alpha1.MaxReplayEntityKey)},
		{"endpointRef.name", "maxLength", int64(v1alpha1.MaxEndpointRefName)},
		{"action", "default", string(v1alpha1.DefaultReplayAction)},
	})
	var enum []string
	for _, v := range field("receipts.outcomes")["items"].(map[string]any)["enum"].([]any) {
		enum = append(enum, v.(string))
	}
	var replayable []string
	for _, o := range receipt.Outcomes {
		if receipt.Replayable(o) {
			replayable = append(replayable, string(o))
		}
	}
	slices.Sort(enum)
	slices.Sort(replayable)
	if !slices.Equal(enum, replayable) {
		t.Errorf("spec.receipts.outcomes enum %v, receipt.Replayable accepts %v", enum, replayable)
	}
}
