package testsupport

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// StripeEndpointSchema is the database schema of StripeEndpoint.
const StripeEndpointSchema = "hookkeeper"

// StripeEndpoint is the WebhookEndpoint of tests that run the receiver as the operator
// does: shop/payments, Stripe, the signing secret in Secret stripe-webhook key current,
// the database URL in Secret shop-db key uri, one managed entity per
// metadata.client_txn_id (the key demo.StripeEvent writes), created by its first event,
// that payment_intent.succeeded moves from payment_pending to paid, emitting order.paid
// to sinkURL; served at /stripe. A test changes what it is about and writes it with
// ManifestFile.
func StripeEndpoint(sinkURL string) *v1alpha1.WebhookEndpoint {
	we := StripeCaptureEndpoint(SecretRef("stripe-webhook", "current"), SecretRef("shop-db", "uri"))
	we.TypeMeta = metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "WebhookEndpoint"}
	we.Namespace, we.Name = "shop", "payments"
	we.Spec.Event.EntityKey = "body.data.object.metadata.client_txn_id"
	we.Spec.Database.Schema = StripeEndpointSchema
	we.Spec.Entity.OnUnmatched = v1alpha1.UnmatchedCreate
	we.Spec.Delivery.Sink.URL = sinkURL
	we.Spec.Delivery.Backoff = v1alpha1.BackoffSpec{
		Initial: &metav1.Duration{Duration: 100 * time.Millisecond}, Max: &metav1.Duration{Duration: time.Second}}
	we.Spec.Receiver.Path = "/stripe"
	return we
}

// Manifest is we as the YAML a platform team applies.
func Manifest(tb testing.TB, we *v1alpha1.WebhookEndpoint) []byte {
	tb.Helper()
	out, err := yaml.Marshal(we)
	if err != nil {
		tb.Fatalf("encode endpoint manifest: %v", err)
	}
	return out
}

// ManifestFile writes Manifest(we) into the test's temporary directory and returns the
// file's path, for the receiver's --endpoint.
func ManifestFile(tb testing.TB, we *v1alpha1.WebhookEndpoint) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "endpoint.yaml")
	if err := os.WriteFile(path, Manifest(tb, we), 0o600); err != nil {
		tb.Fatalf("write endpoint manifest: %v", err)
	}
	return path
}

// StripeEndpointFile writes StripeEndpoint(sinkURL) with ManifestFile.
func StripeEndpointFile(tb testing.TB, sinkURL string) string {
	tb.Helper()
	return ManifestFile(tb, StripeEndpoint(sinkURL))
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
