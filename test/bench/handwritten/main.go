// Command handwritten is the baseline of `make bench`: the Stripe webhook handler a team
// would write by hand from the reference transaction (docs/architecture.md, "The
// pattern"), plainly and correctly, with no hookkeeper code in it:
//
//   - net/http, the body capped at 1 MiB;
//   - the signature checked with stripe-go's own webhook package (ConstructEvent: the
//     HMAC, the 5-minute timestamp tolerance, the API version), 401 when it fails;
//   - one pgx transaction per request: the receipt INSERT ... ON CONFLICT DO NOTHING (a
//     copy stops there), the guarded UPDATE of the order, the outbox INSERT when the
//     update applied;
//   - 200 only after COMMIT, 500 when the transaction fails.
//
// It reads DATABASE_URL (pgxpool settings such as pool_max_conns go in the URL) and
// STRIPE_WEBHOOK_SECRET from the environment:
//
//	DATABASE_URL=postgres://... STRIPE_WEBHOOK_SECRET=whsec_... handwritten -listen 127.0.0.1:8080
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stripe/stripe-go/v85"
	"github.com/stripe/stripe-go/v85/webhook"
)

const maxBodyBytes = 1 << 20

const (
	insertReceipt = `INSERT INTO webhook_receipts (tenant_id, event_id, received_at)
VALUES ($1, $2, now())
ON CONFLICT (tenant_id, event_id) DO NOTHING`
	updateOrder = `UPDATE orders SET status = 'paid', paid_at = now()
WHERE tenant_id = $1 AND client_txn_id = $2
  AND status = 'payment_pending' AND expected_amount_paise = $3`
	insertOutbox = `INSERT INTO fulfilment_outbox (dedupe_key, order_id, event_type)
VALUES ($1, $2, 'order.paid')`
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve webhooks on")
	tenant := flag.String("tenant", "acme", "tenant_id of the receipts and orders")
	flag.Parse()
	if err := run(*listen, *tenant); err != nil {
		log.Fatal(err)
	}
}

func run(listen, tenant string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	secret := os.Getenv("STRIPE_WEBHOOK_SECRET")
	if secret == "" {
		return errors.New("STRIPE_WEBHOOK_SECRET is not set")
	}
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return fmt.Errorf("open database pool: %w", err)
	}
	defer pool.Close()

	mux := http.NewServeMux()
	mux.Handle("POST /", &handler{pool: pool, secret: secret, tenant: tenant})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := pool.Ping(r.Context()); err != nil {
			http.Error(w, "database unreachable", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	srv := &http.Server{Addr: listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shut down: %w", err)
	}
	return nil
}

type handler struct {
	pool   *pgxpool.Pool
	secret string
	tenant string
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		if tooLarge := new(http.MaxBytesError); errors.As(err, &tooLarge) {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "cannot read body", http.StatusBadRequest)
		return
	}
	event, err := webhook.ConstructEvent(body, r.Header.Get("Stripe-Signature"), h.secret)
	if err != nil {
		http.Error(w, "signature verification failed", http.StatusUnauthorized)
		return
	}
	if event.Type != stripe.EventTypePaymentIntentSucceeded {
		w.WriteHeader(http.StatusOK) // not an event this app acts on
		return
	}
	var pi stripe.PaymentIntent
	if err := json.Unmarshal(event.Data.Raw, &pi); err != nil {
		http.Error(w, "malformed payment intent", http.StatusBadRequest)
		return
	}
	orderKey := pi.Metadata["client_txn_id"]
	if orderKey == "" {
		w.WriteHeader(http.StatusOK) // not one of our orders
		return
	}
	if err := h.record(r.Context(), event.ID, orderKey, pi.Amount); err != nil {
		log.Printf("event %s: %v", event.ID, err)
		http.Error(w, "try again later", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// record runs the reference transaction: receipt, guarded update, outbox row, one
// commit. A copy of an event already recorded, or an order no longer pending (or with
// another amount), commits nothing new.
func (h *handler) record(ctx context.Context, eventID, orderKey string, amount int64) error {
	err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, insertReceipt, h.tenant, eventID)
		if err != nil {
			return fmt.Errorf("insert receipt: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return nil // a copy: already handled
		}
		tag, err = tx.Exec(ctx, updateOrder, h.tenant, orderKey, amount)
		if err != nil {
			return fmt.Errorf("update order: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return nil // not pending any more, or not this amount: no effect
		}
		if _, err := tx.Exec(ctx, insertOutbox, eventID, orderKey); err != nil {
			return fmt.Errorf("insert outbox row: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record event: %w", err)
	}
	return nil
}
