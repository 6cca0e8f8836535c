package controllers

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// Pure branch tests of the pool watch and the pool reconcile's Secret reads; the
// envtest suite (ReceiverPoolServesItsEndpoints) covers them against an API server.

func TestChangedMembers(t *testing.T) {
	before := []v1alpha1.PoolMember{
		{Name: "a", Path: "/a/", Loaded: true},
		{Name: "b", Path: "/b/", Message: "invalid config"},
		{Name: "c", Path: "/c/", Loaded: true},
	}
	after := []v1alpha1.PoolMember{
		{Name: "a", Path: "/a/", Loaded: true},
		{Name: "b", Path: "/b/", Loaded: true},
		{Name: "d", Path: "/d/", Loaded: true},
	}
	got := changedMembers(before, after)
	slices.Sort(got)
	if want := []string{"b", "c", "d"}; !slices.Equal(got, want) {
		t.Errorf("changedMembers = %v, want %v (changed, removed, added; not the unchanged a)", got, want)
	}
	if got := changedMembers(after, after); len(got) != 0 {
		t.Errorf("no change: %v, want none", got)
	}
}

func TestPoolChangeConcernsAll(t *testing.T) {
	pool := func(gen int64, status metav1.ConditionStatus, msg string, members ...string) *v1alpha1.WebhookReceiverPool {
		p := &v1alpha1.WebhookReceiverPool{ObjectMeta: metav1.ObjectMeta{Name: "shared", Namespace: "shop", Generation: gen}}
		p.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReceiverAvailable, Status: status, Reason: "R", Message: msg,
			LastTransitionTime: metav1.Now()}}
		for _, m := range members {
			p.Status.Endpoints = append(p.Status.Endpoints, v1alpha1.PoolMember{Name: m, Loaded: true})
		}
		return p
	}
	base := pool(1, metav1.ConditionTrue, "2 of 2 available", "a")
	for _, c := range []struct {
		name string
		new  *v1alpha1.WebhookReceiverPool
		all  bool
	}{
		{"a member added", pool(1, metav1.ConditionTrue, "2 of 2 available", "a", "b"), false},
		{"the spec", pool(2, metav1.ConditionTrue, "2 of 2 available", "a"), true},
		{"availability", pool(1, metav1.ConditionFalse, "2 of 2 available", "a"), true},
		{"availability's message", pool(1, metav1.ConditionTrue, "1 of 2 available", "a"), true},
	} {
		if got := poolChangeConcernsAll(base, c.new); got != c.all {
			t.Errorf("%s: concerns all = %v, want %v", c.name, got, c.all)
		}
	}
}

func TestPoolServingWait(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	st := func(cond *metav1.Condition) *state {
		ep := &v1alpha1.WebhookEndpoint{}
		if cond != nil {
			ep.Status.Conditions = []metav1.Condition{*cond}
		}
		return newState(ep, now)
	}
	waiting := func(since time.Duration, status metav1.ConditionStatus) *metav1.Condition {
		return &metav1.Condition{Type: v1alpha1.ConditionReceiverAvailable, Status: status, Reason: ReasonNotLoaded,
			LastTransitionTime: metav1.NewTime(now.Add(-since))}
	}
	for _, c := range []struct {
		name string
		cond *metav1.Condition
		want time.Duration
	}{
		{"first look", nil, poolServingPoll},
		{"was available", waiting(time.Hour, metav1.ConditionTrue), poolServingPoll},
		{"waiting 4 s", waiting(4*time.Second, metav1.ConditionFalse), poolServingPoll},
		{"waiting 20 s", waiting(20*time.Second, metav1.ConditionFalse), 5 * time.Second},
		{"waiting 10 min", waiting(10*time.Minute, metav1.ConditionFalse), poolServingPollMax},
	} {
		if got := poolServingWait(st(c.cond)); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// countingReader counts the Gets that reach the client.
type countingReader struct {
	client.Reader
	gets int
}

func (r *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.gets++
	return r.Reader.Get(ctx, key, obj, opts...)
}

func TestSecretMemoReadsEachSecretOnce(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop"}, Data: map[string][]byte{"uri": []byte("postgres://x")}}
	reader := &countingReader{Reader: fake.NewClientBuilder().WithScheme(scheme).WithObjects(secret).Build()}
	memo := &secretMemo{reader: reader, got: map[client.ObjectKey]*corev1.Secret{}}
	ctx := context.Background()
	key := client.ObjectKey{Namespace: "shop", Name: "db"}
	var first, second corev1.Secret
	if err := memo.Get(ctx, key, &first); err != nil {
		t.Fatal(err)
	}
	first.Data["uri"][0] = 'X' // a caller's change must not reach the next caller
	if err := memo.Get(ctx, key, &second); err != nil {
		t.Fatal(err)
	}
	if reader.gets != 1 {
		t.Errorf("%d Gets reached the client for one Secret, want 1", reader.gets)
	}
	if string(second.Data["uri"]) != "postgres://x" {
		t.Errorf("second read got %q, want the Secret's value", second.Data["uri"])
	}
	missing := client.ObjectKey{Namespace: "shop", Name: "missing"}
	for range 2 {
		if err := memo.Get(ctx, missing, &corev1.Secret{}); !apierrors.IsNotFound(err) {
			t.Fatalf("missing Secret: %v, want not found", err)
		}
	}
	if reader.gets != 3 {
		t.Errorf("%d Gets, want 3: a Secret not found is read again", reader.gets)
	}
}
