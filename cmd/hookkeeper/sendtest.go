package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/demo"
	"github.com/hookkeeper/hookkeeper/internal/devcluster"
	"github.com/hookkeeper/hookkeeper/internal/event"
	"github.com/hookkeeper/hookkeeper/internal/provider"
	"github.com/hookkeeper/hookkeeper/internal/receipt"
	"github.com/hookkeeper/hookkeeper/internal/resources"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

func init() { rootCmd.AddCommand(newSendTestCmd()) }

// The entity and event type send-test sends by default: the samples reserve them for
// tests (order hookkeeper-test, whose test transition moves nothing and emits
// order.test).
const (
	defaultTestEntity = demo.TestOrder
	defaultTestType   = "hookkeeper.test"
)

type sendTestFlags struct {
	endpointFlags
	url, entity, eventType, bodyFile string
	timeout                          time.Duration
}

func newSendTestCmd() *cobra.Command {
	var f sendTestFlags
	cmd := &cobra.Command{
		Use:   "send-test [-n NAMESPACE] NAME [--url URL] [--entity KEY] [--type TYPE] [--body FILE]",
		Short: "Send an endpoint a correctly signed test event and report what became of it",
		Long: `send-test sends one endpoint a test event signed with its current signing secret, as
its provider signs, and follows it through: the receiver's answer, the receipt recorded
for the event id, the entity's state afterwards and the outbox delivery. It exits non-zero
when a step fails: the receiver refuses the request, no receipt is recorded, or the
delivery is dead-lettered or not made in time (--timeout).

Given NAME, it reads the WebhookEndpoint and the Secrets it references through the
kubeconfig as kubectl does (--kubeconfig, --context, -n), and the database from its
Secret (--database-url from outside the cluster; see hookkeeper replay). The signing
secret is never printed.

The event is a sample of the endpoint's provider whose id is fresh, whose type is --type
(default ` + defaultTestType + `) and whose entity key is --entity (default ` + defaultTestEntity + `): the
samples reserve that entity for tests, and their test transition moves nothing real.
Before sending, it reads the event with the endpoint's own spec.event expressions; when
they do not read that type and entity from the sample (custom expressions), send your
own body with --body FILE: it is signed and sent as is.

It posts to --url; else to status.url when the endpoint is exposed over https; else to a
ready receiver pod behind the endpoint's Service (pod IPs are reachable inside the
cluster network, and on the node of ` + "`hookkeeper dev`" + `). Discord and type Ed25519 endpoints
cannot be sent to: their Secret holds the sender's public key, which cannot sign.`,
	}
	fl := endpointCommand(cmd, &f.endpointFlags, func(ctx context.Context, name string, stdout, _ io.Writer) error {
		return runSendTest(ctx, f, name, stdout)
	})
	fl.StringVar(&f.url, "url", "", "where to POST (default: status.url when exposed over https, else a ready receiver pod)")
	fl.StringVar(&f.entity, "entity", defaultTestEntity, "the sample event's entity key")
	fl.StringVar(&f.eventType, "type", defaultTestType, "the sample event's type")
	fl.StringVar(&f.bodyFile, "body", "", "send this file's bytes as the body (signed as is) instead of the provider's sample")
	fl.DurationVar(&f.timeout, "timeout", 30*time.Second, "how long to wait for the receipt and for the delivery")
	return cmd
}

// runSendTest prints the report as it goes; a failed step returns its error.
func runSendTest(ctx context.Context, f sendTestFlags, name string, out io.Writer) error {
	if err := f.check(name); err != nil {
		return err
	}
	if name == "" && f.url == "" {
		return errors.New("without NAME there is no cluster to find the receiver in: give --url")
	}
	db, err := openEndpointDB(ctx, f.endpointFlags, name)
	if err != nil {
		return err
	}
	defer db.Pool.Close()
	ep, err := config.Compile(db.WE, db.Getenv)
	if err != nil {
		return fmt.Errorf("load endpoint: %w", err)
	}
	secret, index, err := currentSigningSecret(db.WE, db.Getenv, time.Now())
	if err != nil {
		return err
	}

	// The delivery: the provider's sample, or the user's body, signed.
	d, err := f.delivery(ep)
	if err != nil {
		return err
	}
	d, err = provider.Sign(ep.Spec.Provider, secret, d)
	if errors.Is(err, provider.ErrCannotSign) {
		return fmt.Errorf("send-test cannot sign for %s: %w", db.Key, err)
	}
	if err != nil {
		// The secret's index, never its value.
		return fmt.Errorf("sign with spec.signingSecrets[%d]: %w", index, err)
	}
	events, err := readBack(ep, d)
	if err != nil {
		return err
	}
	if f.bodyFile == "" {
		if err := matchesSample(ep, events[0], f); err != nil {
			return err
		}
	}

	target := f.url
	via := ""
	if target == "" {
		if target, via, err = resolveReceiverURL(ctx, f.kube, db.WE); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "endpoint:  %s (%s, signed with spec.signingSecrets[%d])\n", db.Key, ep.Spec.Provider.Type, index)
	for _, ev := range events {
		fmt.Fprintf(out, "event:     id %s, type %s, entity %s\n", ev.ID, ev.Type, orNone(ev.EntityKey))
	}
	fmt.Fprintf(out, "POST       %s%s\n", target, via)
	status, answer, err := post(ctx, target, d)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "answer:    %d %s\n", status, answer)
	if err := answerError(status, answer); err != nil {
		return err
	}

	deadline := time.Now().Add(f.timeout)
	delivered := true
	for _, ev := range events {
		ok, err := followEvent(ctx, out, db.Pool, ep, ev, deadline)
		if err != nil {
			return err
		}
		delivered = delivered && ok
	}
	if !delivered {
		return errors.New("the event was received but not delivered: see the outbox line above")
	}
	return nil
}

// delivery is the unsigned request: the provider's sample for --type and --entity, or
// --body as is.
func (f sendTestFlags) delivery(ep *config.Endpoint) (provider.Delivery, error) {
	now := time.Now()
	if f.bodyFile != "" {
		body, err := os.ReadFile(f.bodyFile)
		if err != nil {
			return provider.Delivery{}, fmt.Errorf("--body: %w", err)
		}
		h := http.Header{}
		h.Set("Content-Type", "application/json")
		if trimmed := bytes.TrimSpace(body); len(trimmed) > 0 && trimmed[0] != '{' && trimmed[0] != '[' {
			h.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		return provider.Delivery{Body: body, Header: h, Time: now}, nil
	}
	d, err := provider.Sample(ep.Spec.Provider, provider.SampleEvent{
		ID: testEventID(now), Type: f.eventType, EntityKey: f.entity, Time: now,
	})
	if err != nil {
		return provider.Delivery{}, fmt.Errorf("%w (send your own body with --body FILE)", err)
	}
	return d, nil
}

// testEventID is a fresh event id: no ':' (Adyen joins its id with them), sortable by
// time.
func testEventID(now time.Time) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "evt_hktest_" + strconv.FormatInt(now.UnixMilli(), 36) + hex.EncodeToString(b)
}

// currentSigningSecret is the secret a provider signs with now: the first active one
// without an expiry (during a rotation the new one; the old one has expiresAt), else the
// active one that expires last. It returns the secret and its index in
// spec.signingSecrets.
func currentSigningSecret(we *v1alpha1.WebhookEndpoint, getenv func(string) string, now time.Time) (string, int, error) {
	best := -1
	for i, s := range we.Spec.SigningSecrets {
		if getenv(config.EnvSigningSecretPrefix+strconv.Itoa(i)) == "" {
			continue
		}
		if s.ExpiresAt == nil {
			best = i
			break
		}
		if !now.Before(s.ExpiresAt.Time) {
			continue
		}
		if best < 0 || s.ExpiresAt.After(we.Spec.SigningSecrets[best].ExpiresAt.Time) {
			best = i
		}
	}
	if best < 0 {
		return "", 0, errors.New("the endpoint has no active signing secret")
	}
	return getenv(config.EnvSigningSecretPrefix + strconv.Itoa(best)), best, nil
}

// readBack verifies the signed request with the endpoint's own verifier and reads its
// events with its own expressions, as the receiver will: what it records is what
// send-test then looks for.
func readBack(ep *config.Endpoint, d provider.Delivery) ([]event.Event, error) {
	verified, err := ep.Verifier.Open(signature.Request{Header: d.Header, Body: d.Body, Method: d.Method, Now: time.Now()})
	if err != nil {
		return nil, fmt.Errorf("the signed request does not verify with the endpoint's own secrets (is the body what %s signs?): %w", ep.Spec.Provider.Type, err)
	}
	events, err := ep.Extractor.Extract(verified, d.Header)
	if err != nil {
		return nil, fmt.Errorf("the endpoint's spec.event expressions cannot read the event (send a body they read with --body FILE): %w", err)
	}
	return events, nil
}

// matchesSample checks that the endpoint reads the sample as the sample was meant.
func matchesSample(ep *config.Endpoint, ev event.Event, f sendTestFlags) error {
	if ev.Type != f.eventType || ev.EntityKey != f.entity {
		return fmt.Errorf("the endpoint's spec.event expressions read type %q and entity %q from the %s sample, not %q and %q: "+
			"they read fields the sample does not set; send a body they read with --body FILE",
			ev.Type, ev.EntityKey, ep.Spec.Provider.Type, f.eventType, f.entity)
	}
	return nil
}

// resolveReceiverURL finds where to send: status.url when the endpoint is exposed over
// https, else a ready pod behind the receiver Service. via says which.
func resolveReceiverURL(ctx context.Context, kf kubeFlags, we *v1alpha1.WebhookEndpoint) (string, string, error) {
	if we.Spec.Exposure != nil && strings.HasPrefix(we.Status.URL, "https://") {
		return we.Status.URL, " (status.url)", nil
	}
	c, _, err := kubeClient(kf)
	if err != nil {
		return "", "", err
	}
	svcName, path := resources.ServedBy(we)
	var svc corev1.Service
	if err := c.Get(ctx, types.NamespacedName{Namespace: we.Namespace, Name: svcName}, &svc); err != nil {
		return "", "", fmt.Errorf("find the receiver (or give --url): %w", getError(err, "services", we.Namespace, svcName))
	}
	var port *corev1.ServicePort
	for i := range svc.Spec.Ports {
		if svc.Spec.Ports[i].Name == resources.PortNameHTTP {
			port = &svc.Spec.Ports[i]
		}
	}
	if port == nil || len(svc.Spec.Selector) == 0 {
		return "", "", fmt.Errorf("Service %s/%s has no %s port or no selector: give --url", we.Namespace, svcName, resources.PortNameHTTP) //nolint:staticcheck // Service is the kind's name
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(we.Namespace), client.MatchingLabels(svc.Spec.Selector)); err != nil {
		return "", "", fmt.Errorf("find the receiver (or give --url): %w", getError(err, "pods", we.Namespace, "receiver pods of "+svcName))
	}
	for _, pod := range pods.Items {
		if pod.DeletionTimestamp != nil || pod.Status.PodIP == "" || !devcluster.PodReady(&pod) {
			continue
		}
		target, ok := devcluster.ServiceTargetPort(&pod, port)
		if !ok {
			continue
		}
		u := "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(target))) + path
		return u, fmt.Sprintf(" (pod %s of Service %s; from outside the cluster network, give --url)", pod.Name, svcName), nil
	}
	return "", "", fmt.Errorf("no ready receiver pod behind Service %s/%s: is the endpoint Ready (kubectl -n %s get webhookendpoints)? or give --url", //nolint:staticcheck // Service is the kind's name
		we.Namespace, svcName, we.Namespace)
}

var sendTestClient = &http.Client{Timeout: 30 * time.Second}

// post sends the signed request and returns the status and the start of the answer.
func post(ctx context.Context, target string, d provider.Delivery) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, d.Method, target, bytes.NewReader(d.Body))
	if err != nil {
		return 0, "", fmt.Errorf("build the request to %s: %w", target, err)
	}
	req.Header = d.Header.Clone()
	resp, err := sendTestClient.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("POST %s: %w", target, err)
	}
	defer func() { _ = resp.Body.Close() }()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
	return resp.StatusCode, strings.TrimSpace(string(answer)), nil
}

// answerError says what a refusal means.
func answerError(status int, answer string) error {
	switch {
	case status >= 200 && status < 300:
		return nil
	case status == http.StatusUnauthorized:
		return fmt.Errorf("the receiver refused the signature (401 %s): it does not verify with the secret send-test read from the cluster. "+
			"Has the Secret changed since the receivers started (the operator rolls them), or is --url another endpoint's receiver?", answer)
	case status == http.StatusBadRequest:
		return fmt.Errorf("the receiver could not read the event (400 %s)", answer)
	case status == http.StatusNotFound || status == http.StatusMethodNotAllowed:
		return fmt.Errorf("the receiver answered %d %s: is the URL the endpoint's receiver, with spec.receiver.path?", status, answer)
	}
	return fmt.Errorf("the receiver answered %d %s", status, answer)
}

// pollInterval is how often the database is read while waiting.
const pollInterval = 200 * time.Millisecond

// followEvent reports the receipt of ev, its entity's state and its outbox rows, waiting
// for the receipt and the delivery until deadline. delivered is false when the outbox
// row is not delivered yet at the deadline.
func followEvent(ctx context.Context, out io.Writer, pool *pgxpool.Pool, ep *config.Endpoint, ev event.Event, deadline time.Time) (delivered bool, err error) {
	var outcome, detail string
	err = poll(ctx, deadline, func() (bool, error) {
		err := pool.QueryRow(ctx, `SELECT outcome, detail FROM `+ep.Tables.Events+` WHERE endpoint = $1 AND event_id = $2`,
			ep.Key(), ev.ID).Scan(&outcome, &detail)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return false, fmt.Errorf("read the receipt of %s: %w", ev.ID, err)
	}
	if outcome == "" {
		return false, fmt.Errorf("no receipt of event %s in the endpoint's database after the receiver's 2xx: "+
			"is --url (or --database-url) this endpoint's receiver (database)?", ev.ID)
	}
	fmt.Fprintf(out, "receipt:   %s%s\n", outcome, parenthesised(detail))

	if ev.EntityKey != "" {
		state, found, err := receipt.EntityState(ctx, pool, ep, ev.EntityKey)
		switch {
		case err != nil:
			return false, err
		case found:
			fmt.Fprintf(out, "entity:    %s is %s\n", ev.EntityKey, state)
		default:
			fmt.Fprintf(out, "entity:    %s does not exist\n", ev.EntityKey)
		}
	}

	type row struct {
		id                  int64
		eventType           string
		attempts            int
		deliveredAt, deadAt *time.Time
		lastError           *string
	}
	var rows []row
	err = poll(ctx, deadline, func() (bool, error) {
		r, err := pool.Query(ctx, `SELECT id, event_type, attempts, delivered_at, dead_at, last_error FROM `+ep.Tables.Outbox+`
WHERE endpoint = $1 AND source_event_id = $2 ORDER BY id`, ep.Key(), ev.ID)
		if err != nil {
			return false, err
		}
		rows, err = pgx.CollectRows(r, func(r pgx.CollectableRow) (row, error) {
			var x row
			return x, r.Scan(&x.id, &x.eventType, &x.attempts, &x.deliveredAt, &x.deadAt, &x.lastError)
		})
		if err != nil {
			return false, err
		}
		for _, x := range rows {
			if x.deliveredAt == nil && x.deadAt == nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return false, fmt.Errorf("read the outbox rows of %s: %w", ev.ID, err)
	}
	if len(rows) == 0 {
		fmt.Fprintf(out, "outbox:    nothing to deliver (outcome %s emits no event)\n", outcome)
		return true, nil
	}
	delivered = true
	for _, x := range rows {
		lastError := ""
		if x.lastError != nil {
			lastError = *x.lastError
		}
		switch {
		case x.deliveredAt != nil:
			fmt.Fprintf(out, "outbox:    %s (row %d) delivered at %s after %d attempt(s)\n", x.eventType, x.id, x.deliveredAt.UTC().Format(time.RFC3339), x.attempts)
		case x.deadAt != nil:
			fmt.Fprintf(out, "outbox:    %s (row %d) DEAD after %d attempt(s): %s\n", x.eventType, x.id, x.attempts, lastError)
			return false, fmt.Errorf("the delivery of %s (outbox row %d) is dead-lettered: %s", x.eventType, x.id, lastError)
		default:
			fmt.Fprintf(out, "outbox:    %s (row %d) not delivered yet: %d attempt(s), last error %s\n", x.eventType, x.id, x.attempts, orNone(lastError))
			delivered = false
		}
	}
	return delivered, nil
}

// poll calls done until it reports true, fails, or deadline passes (then it returns
// nil: the caller reads what it has).
func poll(ctx context.Context, deadline time.Time, done func() (bool, error)) error {
	for {
		ok, err := done()
		if err != nil || ok || !time.Now().Before(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollInterval):
		}
	}
}

func parenthesised(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
