package receipt

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// step is one statement and how to read its result.
type step struct {
	sql  string
	args pgx.NamedArgs
	read func(pgx.BatchResults) error
}

func execStep(sql string, args pgx.NamedArgs) step {
	return step{sql: sql, args: args, read: func(br pgx.BatchResults) error {
		_, err := br.Exec()
		return err
	}}
}

// pipelinedTx is one receipt transaction on one connection. Statements are queued and
// sent together: BEGIN rides with the first round trip (send) and COMMIT with the last
// (inTx), so a transaction costs as many round trips as it has sends plus one.
type pipelinedTx struct {
	conn   *pgxpool.Conn
	queued []step
}

// queue adds steps to the next round trip.
func (tx *pipelinedTx) queue(steps ...step) { tx.queued = append(tx.queued, steps...) }

// send runs the queued steps in one round trip and reads their results in order.
func (tx *pipelinedTx) send(ctx context.Context) error {
	steps := tx.queued
	tx.queued = nil
	b := &pgx.Batch{}
	for _, s := range steps {
		if s.args == nil {
			b.Queue(s.sql)
		} else {
			b.Queue(s.sql, s.args)
		}
	}
	br := tx.conn.SendBatch(ctx, b)
	var err error
	for _, s := range steps {
		if err = s.read(br); err != nil {
			break
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

var (
	beginStep  = execStep("BEGIN ISOLATION LEVEL READ COMMITTED", nil)
	commitStep = step{sql: "COMMIT", read: func(br pgx.BatchResults) error {
		tag, err := br.Exec()
		if err != nil {
			return err
		}
		// COMMIT of an aborted transaction answers ROLLBACK without an error.
		if tag.String() != "COMMIT" {
			return fmt.Errorf("commit answered %q", tag.String())
		}
		return nil
	}}
)

// inTx runs fn in one transaction: BEGIN is queued before fn runs, whatever fn left
// queued is sent with COMMIT. When fn or the commit fails, the transaction is rolled
// back and the error returned: nothing of it is committed.
func (r *Recorder) inTx(ctx context.Context, fn func(tx *pipelinedTx) error) (err error) {
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire database connection: %w", err)
	}
	defer func() {
		if err != nil {
			rollback(conn)
		}
		conn.Release()
	}()
	tx := &pipelinedTx{conn: conn, queued: []step{beginStep}}
	if err := fn(tx); err != nil {
		return err
	}
	tx.queue(commitStep)
	return tx.send(ctx)
}

// inTxWithRetries is inTx, again when PostgreSQL chose the transaction as a deadlock
// victim (possible for Adyen batches touching several entities).
func (r *Recorder) inTxWithRetries(ctx context.Context, fn func(tx *pipelinedTx) error) error {
	for attempt := 0; ; attempt++ {
		err := r.inTx(ctx, fn)
		if err != nil && isDeadlock(err) && attempt < r.deadlockRetries && ctx.Err() == nil {
			continue
		}
		return err
	}
}

func isDeadlock(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001")
}

// rollback ends a failed transaction. When the connection cannot answer, the pool
// destroys it on release (it is not idle), and PostgreSQL rolls back on disconnect.
func rollback(conn *pgxpool.Conn) {
	if conn.Conn().PgConn().TxStatus() == 'I' {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = conn.Exec(ctx, "ROLLBACK")
}
