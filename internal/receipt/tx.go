package receipt

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookkeeper/hookkeeper/internal/store"
)

// positional is a statement written with named arguments (@name), rewritten to
// PostgreSQL's positional parameters once per SQL text, with the names in $n order.
// pgx.NamedArgs would re-parse the SQL text on every execution: measured at ~100 µs for
// an 1,800-character statement, more than the rest of the receiver's work per event.
type positional struct {
	sql   string
	names []string
}

var (
	rewritten   sync.Map // named SQL text -> positional
	namePattern = regexp.MustCompile(`@([A-Za-z_][A-Za-z0-9_]*)`)
)

// rewrite returns named's positional form. pgx's own lexer does the rewriting (it skips
// string literals and comments); the probe maps every @word to itself, so the rewritten
// arguments are the names in order.
func rewrite(named string) positional {
	if p, ok := rewritten.Load(named); ok {
		return p.(positional)
	}
	probe := pgx.NamedArgs{}
	for _, m := range namePattern.FindAllStringSubmatch(named, -1) {
		probe[m[1]] = m[1]
	}
	sql, args, _ := probe.RewriteQuery(context.Background(), nil, named, nil) // NamedArgs never fails
	p := positional{sql: sql, names: make([]string, len(args))}
	for i, a := range args {
		p.names[i] = a.(string)
	}
	rewritten.Store(named, p)
	return p
}

// bind orders args as the statement's parameters. A name the statement uses but args
// lacks is a programming error, reported rather than sent as NULL.
func (p positional) bind(args pgx.NamedArgs) ([]any, error) {
	out := make([]any, len(p.names))
	for i, n := range p.names {
		v, ok := args[n]
		if !ok {
			return nil, fmt.Errorf("statement argument @%s is not set", n)
		}
		out[i] = v
	}
	return out, nil
}

// step is one statement and how to read its result.
type step struct {
	sql  string
	args pgx.NamedArgs
	read func(pgx.BatchResults) error
	// write marks a statement that changes rows (beyond the entity lock).
	write bool
}

func execStep(sql string, args pgx.NamedArgs) step {
	return step{sql: sql, args: args, read: func(br pgx.BatchResults) error {
		_, err := br.Exec()
		return err
	}}
}

// pipelinedTx is one receipt transaction on one connection. Statements are queued and
// sent together: BEGIN (with indexesStep) rides with the first round trip (send) and
// COMMIT with the last (inTx), so a transaction costs as many round trips as it has
// sends plus one.
type pipelinedTx struct {
	conn   *pgxpool.Conn
	queued []step
	wrote  bool
}

// queue adds steps to the next round trip.
func (tx *pipelinedTx) queue(steps ...step) {
	for _, s := range steps {
		tx.wrote = tx.wrote || s.write
	}
	tx.queued = append(tx.queued, steps...)
}

// send runs the queued steps in one round trip and reads their results in order.
func (tx *pipelinedTx) send(ctx context.Context) error {
	steps := tx.queued
	tx.queued = nil
	b := &pgx.Batch{}
	for _, s := range steps {
		p := rewrite(s.sql)
		args, err := p.bind(s.args)
		if err != nil {
			return err
		}
		b.Queue(p.sql, args...)
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

// execWriteStep is execStep for a statement that changes rows.
func execWriteStep(sql string, args pgx.NamedArgs) step {
	s := execStep(sql, args)
	s.write = true
	return s
}

var (
	beginStep = execStep("BEGIN ISOLATION LEVEL READ COMMITTED", nil)
	// indexesStep plans the transaction's statements on their indexes, whatever the
	// size of the tables when a statement is planned (store.PlanOnIndexes says why).
	indexesStep = execStep(store.PlanOnIndexes, nil)
	// groupSettingsStep is indexesStep for a transaction of the grouper (group.go), in
	// the same statement: its lock waits end after groupLockTimeout.
	groupSettingsStep = execStep(store.PlanOnIndexes+", set_config('lock_timeout', '"+groupLockTimeout+"', true)", nil)
	rollbackStep      = execStep("ROLLBACK", nil)
	commitStep        = step{sql: "COMMIT", read: func(br pgx.BatchResults) error {
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
// back and the error returned: nothing of it is committed. A transaction that wrote
// nothing (every event a duplicate) ends with ROLLBACK: it only released its locks, and
// a commit would wait for a WAL flush of the row locks' transaction id.
func (r *Recorder) inTx(ctx context.Context, fn func(tx *pipelinedTx) error) error {
	return r.inTxWith(ctx, indexesStep, fn)
}

// inTxWith is inTx with settings (indexesStep or groupSettingsStep) sent after BEGIN.
func (r *Recorder) inTxWith(ctx context.Context, settings step, fn func(tx *pipelinedTx) error) (err error) {
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
	tx := &pipelinedTx{conn: conn, queued: []step{beginStep, settings}}
	if err := fn(tx); err != nil {
		return err
	}
	if tx.wrote {
		tx.queue(commitStep)
	} else {
		tx.queue(rollbackStep)
	}
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
