package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// DefaultConnectGate is how many connections a receiver pool process opens to one
// database at once (NewConnectGate).
const DefaultConnectGate = 4

// ConnectGate bounds how many connections to one database the pools sharing it open at
// the same time. A receiver pool serving hundreds of endpoints of one database would
// otherwise open hundreds of sessions in the same instant (every endpoint's first
// webhook, or its tasks after a restart), and a small PostgreSQL's postmaster, which
// forks one backend per connection, answers late enough that every one of them times
// out and retries. Behind the gate they queue in the process instead and each connects
// in a few milliseconds. It is a pgx connect tracer, so a connection that fails still
// gives its slot back.
type ConnectGate struct {
	slots chan struct{}
}

// NewConnectGate lets n connections be opened at once.
func NewConnectGate(n int) *ConnectGate {
	return &ConnectGate{slots: make(chan struct{}, max(n, 1))}
}

type gateSlot struct{ g *ConnectGate }

// TraceConnectStart waits for a slot (or for ctx, whose end also ends the connect).
func (g *ConnectGate) TraceConnectStart(ctx context.Context, _ pgx.TraceConnectStartData) context.Context {
	select {
	case g.slots <- struct{}{}:
		return context.WithValue(ctx, gateSlot{g}, true)
	case <-ctx.Done():
		return ctx
	}
}

// TraceConnectEnd gives the slot back, whether the connection succeeded or not.
func (g *ConnectGate) TraceConnectEnd(ctx context.Context, _ pgx.TraceConnectEndData) {
	if ctx.Value(gateSlot{g}) != nil {
		<-g.slots
	}
}

// TraceQueryStart and TraceQueryEnd make a ConnectGate a pgx.QueryTracer, the type of
// pgx.ConnConfig.Tracer; queries are not traced.
func (g *ConnectGate) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

// TraceQueryEnd does nothing.
func (g *ConnectGate) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
