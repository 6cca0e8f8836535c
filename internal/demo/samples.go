package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// SampleNamespace is where the demos put the samples.
const SampleNamespace = "shop"

// SampleFiles are the sample files both demos apply, relative to the repository root.
var SampleFiles = []string{
	"config/samples/shared_secrets.yaml",
	"config/samples/hookkeeper_v1alpha1_webhookendpoint_stripe_orders.yaml",
}

// TestOrder is the order reserved for tests: `hookkeeper send-test` sends it an event
// of type hookkeeper.test by default, which the sample's test transition accepts for
// this order only, without moving it.
const TestOrder = "hookkeeper-test"

// SampleOrders are the orders seeded into public.orders for the Stripe sample (tenant
// acme, state payment_pending), by client_txn_id, with their expected amount in paise;
// TestOrder among them.
var SampleOrders = map[string]int64{
	"order-1001": 49900,
	"order-1002": 129900,
	"order-1003": 9900,
	"order-1004": 250000,
	TestOrder:    0,
}

// SeedOrders creates the app table the Stripe sample binds to and puts SampleOrders in
// state payment_pending, resetting them when they exist, so that every demo starts from
// the same orders.
func SeedOrders(ctx context.Context, databaseURL string) error {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("connect to the dev database: %w", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS public.orders (
		tenant_id             text   NOT NULL,
		client_txn_id         text   NOT NULL,
		status                text   NOT NULL,
		expected_amount_paise bigint NOT NULL,
		PRIMARY KEY (tenant_id, client_txn_id))`); err != nil {
		return fmt.Errorf("create orders table: %w", err)
	}
	batch := &pgx.Batch{}
	for id, amount := range SampleOrders {
		batch.Queue(`INSERT INTO public.orders (tenant_id, client_txn_id, status, expected_amount_paise)
			VALUES ('acme', $1, 'payment_pending', $2)
			ON CONFLICT (tenant_id, client_txn_id) DO UPDATE
			SET status = EXCLUDED.status, expected_amount_paise = EXCLUDED.expected_amount_paise`, id, amount)
	}
	if err := conn.SendBatch(ctx, batch).Close(); err != nil {
		return fmt.Errorf("seed orders: %w", err)
	}
	return nil
}

// ReadManifests decodes every document of a YAML (or JSON) manifest file.
func ReadManifests(path string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(path) //nolint:gosec // a sample manifest of this repository
	if err != nil {
		return nil, fmt.Errorf("open sample: %w", err)
	}
	defer func() { _ = f.Close() }()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("decode %s: %w", path, err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// Rewire points a sample object at what the demo runs instead of the cluster the
// sample was written for: the database Secret at databaseURL, the endpoint's delivery
// at sinkURL, and no monitoring (there is no Prometheus Operator to read it).
func Rewire(obj any, databaseURL, sinkURL string) {
	switch o := obj.(type) {
	case *corev1.Secret:
		if o.Name == "shop-db-app" {
			o.StringData = map[string]string{"uri": databaseURL}
		}
	case *v1alpha1.WebhookEndpoint:
		o.Spec.Delivery.Sink = v1alpha1.SinkSpec{URL: sinkURL}
		o.Spec.Monitoring = v1alpha1.MonitoringSpec{}
	}
}
