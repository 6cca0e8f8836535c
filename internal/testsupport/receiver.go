package testsupport

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// StripeEndpointSchema is the database schema of StripeEndpointManifest.
const StripeEndpointSchema = "hookkeeper"

// stripeEndpoint is the WebhookEndpoint of tests that run the receiver as the operator
// does: Stripe, the signing secret in Secret stripe-webhook key current, the database
// URL in Secret shop-db key uri, one managed entity per metadata.client_txn_id (the key
// demo.StripeEvent writes) that payment_intent.succeeded moves from
// payment_pending to paid, emitting order.paid to the sink; served at /stripe.
const stripeEndpoint = `apiVersion: hookkeeper.dev/v1alpha1
kind: WebhookEndpoint
metadata: {name: payments, namespace: shop}
spec:
  provider: {type: Stripe}
  signingSecrets:
  - secretKeyRef: {name: stripe-webhook, key: current}
  event:
    entityKey: body.data.object.metadata.client_txn_id
  database:
    urlSecretRef: {name: shop-db, key: uri}
    schema: ` + StripeEndpointSchema + `
  entity: {onUnmatched: Create}
  stateMachine:
    initial: payment_pending
    states: [payment_pending, paid]
    transitions:
    - {name: capture, "on": [payment_intent.succeeded], from: [payment_pending], to: paid, emit: order.paid}
  delivery:
    sink: {url: %q}
    backoff: {initial: 100ms, max: 1s}
  receiver: {path: /stripe}
`

// StripeEndpointManifest is the YAML of the shared test endpoint (shop/payments, see
// stripeEndpoint) delivering to sinkURL.
func StripeEndpointManifest(sinkURL string) []byte {
	return fmt.Appendf(nil, stripeEndpoint, sinkURL)
}

// StripeEndpointFile writes StripeEndpointManifest into the test's temporary directory
// and returns the file's path, for the receiver's --endpoint.
func StripeEndpointFile(tb testing.TB, sinkURL string) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "endpoint.yaml")
	if err := os.WriteFile(path, StripeEndpointManifest(sinkURL), 0o600); err != nil {
		tb.Fatalf("write endpoint manifest: %v", err)
	}
	return path
}

// readyClient keeps one probe from outliving the poll that sent it.
var readyClient = &http.Client{Timeout: 2 * time.Second}

// WaitReady waits until url (a receiver's /readyz) answers 200, and fails tb when
// timeout passes first or as soon as exited reports that what serves url has ended
// (exited returns nil while it runs; its error, with the process's output if it has
// any, is the failure message).
func WaitReady(tb testing.TB, url string, timeout time.Duration, exited func() error) {
	tb.Helper()
	if err := PollReady(context.Background(), url, timeout, exited); err != nil {
		tb.Fatal(err)
	}
}

// PollReady is WaitReady for code that returns errors instead of failing the test.
func PollReady(ctx context.Context, url string, timeout time.Duration, exited func() error) error {
	err := Poll(ctx, timeout, 50*time.Millisecond, func() error {
		if err := exited(); err != nil {
			return Final(err)
		}
		resp, err := readyClient.Get(url)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s to answer 200: %w", url, err)
	}
	return nil
}
