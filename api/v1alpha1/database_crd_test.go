package v1alpha1_test

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// An endpoint's receipts live in its schema: moving it to another (empty) schema would
// let every re-sent event apply again, so admission refuses the change, including the
// one that drops the field and lets its default apply. Other database fields may change.
func TestCRDDatabaseSchemaIsImmutable(t *testing.T) {
	c, ctx := newClient(t)
	w := validEndpoint("schema-immutable")
	w.Spec.Database.Schema = "payments"
	if err := c.Create(ctx, w); err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), w) })

	for _, schema := range []string{"payments_v2", ""} {
		cur := w.DeepCopy()
		if err := c.Get(ctx, client.ObjectKeyFromObject(w), cur); err != nil {
			t.Fatal(err)
		}
		cur.Spec.Database.Schema = schema
		err := c.Update(ctx, cur)
		if err == nil {
			t.Fatalf("admission accepted moving the endpoint from schema payments to %q", schema)
		}
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "schema is immutable") {
			t.Fatalf("schema %q: want an Invalid error saying the schema is immutable, got %v", schema, err)
		}
	}

	cur := w.DeepCopy()
	if err := c.Get(ctx, client.ObjectKeyFromObject(w), cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec.Database.MaxConnections = 20
	cur.Spec.Database.URLSecretRef.Key = "uri-rotated"
	if err := c.Update(ctx, cur); err != nil {
		t.Fatalf("changing maxConnections and the URL's Secret key: %v", err)
	}
}
