// Package demo is the scripted demo of the Stripe orders sample: signed webhooks for each
// case the product promises (a first delivery, duplicates, a burst of copies, a refund
// before its capture, a forgery, a failed guard), the table of what each left behind,
// the sink that stands in for the app, and the demo without a cluster (RunLocal). It
// needs no Kubernetes client, so the binary that runs it first (hack/demo) builds in a
// fraction of the time hookkeeper does; the local cluster (internal/devcluster) runs the
// same script against its receiver pods.
package demo

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
)

// demoStep is one scripted webhook scenario.
type demoStep struct {
	title     string
	duplicate bool // the event was already sent: expect no new effects
	eventID   string
	order     string
	send      func(ctx context.Context) ([]int, error) // HTTP statuses of the requests sent
}

// StripeEvent renders a minimal Stripe event for the orders sample: a PaymentIntent (or
// charge) whose metadata carries the order's client_txn_id.
func StripeEvent(id, eventType, order string, amount int64, created time.Time) []byte {
	body, _ := json.Marshal(map[string]any{ //nolint:errchkjson // plain maps of strings and numbers
		"id":       id,
		"object":   "event",
		"type":     eventType,
		"created":  created.Unix(),
		"livemode": false,
		"data": map[string]any{"object": map[string]any{
			"id":       "pi_" + strings.TrimPrefix(id, "evt_"),
			"object":   "payment_intent",
			"amount":   amount,
			"currency": "inr",
			"metadata": map[string]string{"client_txn_id": order},
		}},
	})
	return body
}

// StripeSignature computes the Stripe-Signature header for body at time t: HMAC-SHA256
// over "{t}.{body}" keyed with the whole secret string.
func StripeSignature(secret string, body []byte, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}

// PostStripe sends a signed Stripe webhook and returns the HTTP status.
func PostStripe(ctx context.Context, url, secret string, body []byte) (int, error) {
	return PostStripeWith(ctx, demoClient, url, secret, body)
}

// PostStripeWith is PostStripe on client, for a caller that manages its connections
// (closes the idle ones before stopping the receiver it sends to).
func PostStripeWith(ctx context.Context, client *http.Client, url, secret string, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", StripeSignature(secret, body, time.Now()))
	resp, err := client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("post webhook: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

var demoClient = &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

// Target is where Run sends the scripted webhooks and reads their results:
// the Stripe orders sample's receiver, in the local cluster or in process.
type Target struct {
	// URL is the receiver's webhook URL; Secret the sample's Stripe signing secret.
	URL, Secret string
	// Endpoint is the endpoint's key (namespace/name); Schema its hookkeeper schema
	// ("" for the default).
	Endpoint, Schema string
	// DatabaseURL is the database of the receipts and of public.orders.
	DatabaseURL string
	// Sink is where the endpoint delivers.
	Sink *Sink
}

// Run sends the scripted webhooks to t and prints one table row per step: the
// HTTP answers, the receipt's outcome, the order's state and the order's outbox rows
// with their delivery.
func Run(ctx context.Context, t Target, out io.Writer) error {
	url, secret, endpointKey := t.URL, t.Secret, t.Endpoint
	run := strconv.FormatInt(time.Now().Unix(), 36) // event ids unique per run
	now := time.Now()
	post := func(body []byte, key string) func(context.Context) ([]int, error) {
		return func(ctx context.Context) ([]int, error) {
			code, err := PostStripe(ctx, url, key, body)
			return []int{code}, err
		}
	}
	first := StripeEvent("evt_"+run+"_first", "payment_intent.succeeded", "order-1001", SampleOrders["order-1001"], now)
	concurrent := StripeEvent("evt_"+run+"_burst", "payment_intent.succeeded", "order-1002", SampleOrders["order-1002"], now)
	refund := StripeEvent("evt_"+run+"_early_refund", "charge.refunded", "order-1003", SampleOrders["order-1003"], now.Add(time.Minute))
	capture := StripeEvent("evt_"+run+"_late_capture", "payment_intent.succeeded", "order-1003", SampleOrders["order-1003"], now)
	forged := StripeEvent("evt_"+run+"_forged", "payment_intent.succeeded", "order-1004", SampleOrders["order-1004"], now)
	short := StripeEvent("evt_"+run+"_short", "payment_intent.succeeded", "order-1004", 1, now)

	steps := []demoStep{
		{title: "first delivery", eventID: "evt_" + run + "_first", order: "order-1001", send: post(first, secret)},
		{title: "duplicate", duplicate: true, eventID: "evt_" + run + "_first", order: "order-1001", send: post(first, secret)},
		{title: "32 concurrent duplicates", eventID: "evt_" + run + "_burst", order: "order-1002",
			send: func(ctx context.Context) ([]int, error) { return concurrentPosts(ctx, url, secret, concurrent, 32) }},
		{title: "out of order: refund first", eventID: "evt_" + run + "_early_refund", order: "order-1003", send: post(refund, secret)},
		{title: "out of order: capture after", eventID: "evt_" + run + "_late_capture", order: "order-1003", send: post(capture, secret)},
		{title: "bad signature", eventID: "evt_" + run + "_forged", order: "order-1004", send: post(forged, "whsec_not_the_secret")},
		{title: "amount mismatch", eventID: "evt_" + run + "_short", order: "order-1004", send: post(short, secret)},
	}

	conn, err := pgx.Connect(ctx, t.DatabaseURL)
	if err != nil {
		return fmt.Errorf("connect to the demo database: %w", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	schema := t.Schema
	if schema == "" {
		schema = "hookkeeper"
	}

	fmt.Fprintf(out, "\ndemo: signed Stripe webhooks to %s\n", url)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tHTTP\tOUTCOME\tORDER STATE\tOUTBOX (THE ORDER'S)\tDELIVERY")
	for _, st := range steps {
		codes, err := st.send(ctx)
		if err != nil {
			return fmt.Errorf("demo step %q: %w", st.title, err)
		}
		row, err := demoRow(ctx, conn, t.Sink, schema, endpointKey, st)
		if err != nil {
			return fmt.Errorf("demo step %q: %w", st.title, err)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", st.title, summariseCodes(codes), row.outcome, row.state, row.outbox, row.delivery)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("print demo table: %w", err)
	}
	return nil
}

func concurrentPosts(ctx context.Context, url, secret string, body []byte, n int) ([]int, error) {
	codes := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			codes[i], errs[i] = PostStripe(ctx, url, secret, body)
		}()
	}
	close(start)
	wg.Wait()
	return codes, errors.Join(errs...)
}

func summariseCodes(codes []int) string {
	counts := map[int]int{}
	var order []int
	for _, c := range codes {
		if counts[c] == 0 {
			order = append(order, c)
		}
		counts[c]++
	}
	parts := make([]string, 0, len(order))
	for _, c := range order {
		if counts[c] == 1 {
			parts = append(parts, strconv.Itoa(c))
		} else {
			parts = append(parts, fmt.Sprintf("%dx %d", counts[c], c))
		}
	}
	return strings.Join(parts, ", ")
}

type demoResult struct{ outcome, state, outbox, delivery string }

// demoRow reads what the step left behind, waiting briefly for the dispatcher to
// deliver the step's outbox rows.
func demoRow(ctx context.Context, conn *pgx.Conn, sink *Sink, schema, endpoint string, st demoStep) (demoResult, error) {
	var r demoResult
	ident := pgx.Identifier{schema}.Sanitize()
	var receipts int
	var outcome string
	err := conn.QueryRow(ctx, `SELECT count(*), coalesce(min(outcome), '') FROM `+ident+`.webhook_events
		WHERE endpoint = $1 AND event_id = $2`, endpoint, st.eventID).Scan(&receipts, &outcome)
	if err != nil {
		return r, fmt.Errorf("read receipt: %w", err)
	}
	switch {
	case receipts == 0:
		r.outcome = "not stored"
	case st.duplicate:
		r.outcome = fmt.Sprintf("duplicate, no effect (still %d receipt: %s)", receipts, outcome)
	default:
		r.outcome = fmt.Sprintf("%s (%d receipt)", outcome, receipts)
	}
	if err := conn.QueryRow(ctx, `SELECT status FROM public.orders WHERE tenant_id = 'acme' AND client_txn_id = $1`,
		st.order).Scan(&r.state); err != nil {
		return r, fmt.Errorf("read order: %w", err)
	}
	r.state = st.order + ": " + r.state

	deadline := time.Now().Add(10 * time.Second)
	for {
		// The order's effects, not only this event's: a capture that releases a parked
		// refund writes both, in provider order.
		var rows, delivered int
		var keys, types []string
		err := conn.QueryRow(ctx, `SELECT count(*), count(delivered_at), coalesce(array_agg(dedupe_key ORDER BY id), '{}'),
			coalesce(array_agg(event_type ORDER BY id), '{}')
			FROM `+ident+`.outbox WHERE endpoint = $1 AND entity_key = $2`, endpoint, st.order).Scan(&rows, &delivered, &keys, &types)
		if err != nil {
			return r, fmt.Errorf("read outbox: %w", err)
		}
		r.outbox = strconv.Itoa(rows) + " row"
		if rows != 1 {
			r.outbox += "s"
		}
		if rows > 0 {
			r.outbox += ": " + strings.Join(types, ", ")
		}
		if rows == 0 {
			r.delivery = "-"
			return r, nil
		}
		if delivered == rows || time.Now().After(deadline) {
			got := 0
			for _, d := range sink.Deliveries() {
				for _, k := range keys {
					if d.IdempotencyKey == k {
						got++
					}
				}
			}
			r.delivery = fmt.Sprintf("%d/%d delivered, sink got %d", delivered, rows, got)
			return r, nil
		}
		select {
		case <-ctx.Done():
			return r, fmt.Errorf("wait for delivery: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
