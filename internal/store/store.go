// Package store owns hookkeeper's PostgreSQL schema: connection pools bound to an
// endpoint's schema, the embedded migrations and the quoted table names.
package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// SchemaVersion is the newest migration version embedded in this binary. The operator
// puts it in the migration Job's name, so a new binary runs a new Job.
var SchemaVersion = mustLatestVersion()

// Tables holds the quoted, schema-qualified names of hookkeeper's tables. Identifiers
// from the spec are only ever used through pgx's identifier quoting.
type Tables struct {
	Schema   string
	Events   string
	Entities string
	Outbox   string
	// EntityClocks keeps last_event_at for entities in an app's own table.
	EntityClocks string
	// SinkState is what the dispatchers know of each endpoint's sink.
	SinkState string
	// DeadLetterDiscards records each deliberate discard of dead letters.
	DeadLetterDiscards string
	// Erasures records each erasure of an entity's payloads.
	Erasures string
	// ReplayRuns records each WebhookReplay's run, so it runs once.
	ReplayRuns string
	// ReceiverHeartbeats holds one row per receiver pool pod serving the endpoint.
	ReceiverHeartbeats string
}

// TablesIn returns the table names inside schema.
func TablesIn(schema string) Tables {
	q := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	return Tables{
		Schema:   pgx.Identifier{schema}.Sanitize(),
		Events:   q("webhook_events"),
		Entities: q("entities"),
		Outbox:   q("outbox"),

		EntityClocks:       q("entity_clocks"),
		SinkState:          q("sink_state"),
		DeadLetterDiscards: q("dead_letter_discards"),
		Erasures:           q("erasures"),
		ReplayRuns:         q("replay_runs"),
		ReceiverHeartbeats: q("receiver_heartbeats"),
	}
}

// Open parses url, sizes the pool and checks the server answers. The pool's sessions
// keep the default search_path: every query names its schema.
func Open(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	pool, err := NewPool(ctx, url, PoolOptions{MaxConns: maxConns})
	if err != nil {
		return nil, err
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		cfg := pool.Config().ConnConfig
		pool.Close()
		return nil, fmt.Errorf("reach database at %s:%d: %w", cfg.Host, cfg.Port, err)
	}
	return pool, nil
}

// PoolOptions size a pool built by NewPool; zero fields keep pgxpool's defaults.
type PoolOptions struct {
	// MaxConns is spec.database.maxConnections.
	MaxConns int32
	// MaxConnIdleTime closes connections idle this long (checked every
	// HealthCheckPeriod), so a quiet endpoint of a receiver pool holds no session.
	MaxConnIdleTime   time.Duration
	HealthCheckPeriod time.Duration
	// Gate, when set, is shared by every pool of one database in the process: it bounds
	// how many of their connections are being opened at once.
	Gate *ConnectGate
}

// NewPool parses url and builds a pool without connecting: the first query connects.
// A receiver pool builds its endpoints' pools this way, so an endpoint whose database
// is down still starts (and answers 503 until the database is back) without holding up
// the others. Its errors never contain the URL.
func NewPool(ctx context.Context, url string, o PoolOptions) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx's parse error can echo the URL, password included: say less.
		return nil, errors.New("database URL is not a valid PostgreSQL connection string")
	}
	if o.MaxConns > 0 {
		cfg.MaxConns = o.MaxConns
	}
	if o.MaxConnIdleTime > 0 {
		cfg.MaxConnIdleTime = o.MaxConnIdleTime
	}
	if o.HealthCheckPeriod > 0 {
		cfg.HealthCheckPeriod = o.HealthCheckPeriod
	}
	cfg.MinConns = 0
	cfg.ConnConfig.ConnectTimeout = ConnectTimeout
	if o.Gate != nil {
		cfg.ConnConfig.Tracer = o.Gate
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database pool: %w", err)
	}
	return pool, nil
}

// PlanOnIndexes, sent first in a transaction (or in the implicit transaction of a
// pipelined batch, which lasts until its Sync), turns sequential scans and sorts off for
// the rest of that transaction only. Every statement hookkeeper runs on an endpoint's
// tables (the receipt transaction, the dispatcher, the parking sweep, retention) reads
// its rows through an index, in the index's order, by design; PostgreSQL's estimates
// are what can make it plan otherwise:
//   - It plans a prepared statement once per connection (its generic plan, from the
//     sixth execution) and keeps that plan until the table is analyzed again. Planned
//     while a new endpoint's tables hold a few hundred rows, a point lookup or a join on
//     the primary key is a sequential scan, and every call would then scan the whole
//     table it is filling (or, for the outbox, a week of delivered history) for as long
//     as autovacuum takes to come back: a minute at least.
//   - On a table never analyzed it estimates one row for almost any condition, and two
//     plans can cost the same to a hundredth: the dispatcher's "first pending row of
//     this entity" was planned, in some runs, as every pending row of the endpoint
//     through outbox_due_idx, sorted, once per candidate, where
//     outbox_entity_pending_idx returns the entity's first row in one probe (a claim of
//     16 rows took 30 to 60 ms instead of under one).
//
// docs/benchmarks.md, "A new endpoint's first minute", has the measurements. A table with
// no index to use (an app table without one on its key) is still scanned, and a sort no
// index can replace is still made. The settings never outlive the transaction, so
// nothing carries over to a session shared through a pooler such as PgBouncer, nor to
// anything else a pool runs.
const PlanOnIndexes = "SELECT set_config('enable_seqscan', 'off', true), set_config('enable_sort', 'off', true)"

// OnIndexes queues sql after PlanOnIndexes in one batch: one round trip and one
// implicit transaction, so the setting holds for sql alone. Read sql's result through
// the returned query's callbacks (Query, QueryRow, Exec), then send the batch and close
// its results.
func OnIndexes(sql string, args ...any) (*pgx.Batch, *pgx.QueuedQuery) {
	b := &pgx.Batch{}
	b.Queue(PlanOnIndexes)
	return b, b.Queue(sql, args...)
}

// ConnectTimeout bounds opening one database connection (TCP, TLS and PostgreSQL's
// startup), for every pool, LISTEN connection and migration: a server that accepts and
// never answers fails in seconds, not at the caller's own deadline (a migration Job's
// five minutes).
const ConnectTimeout = 5 * time.Second

// Migrate brings schema up to SchemaVersion under a PostgreSQL advisory lock, so
// concurrent migration Jobs for endpoints sharing a database are safe. It returns the
// version reached.
func Migrate(ctx context.Context, url, schema string) (int64, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return 0, errors.New("database URL is not a valid PostgreSQL connection string")
	}
	// goose keeps its version table in the search_path's first schema, so every
	// endpoint schema has its own migration history.
	cfg.RuntimeParams["search_path"] = schema
	cfg.ConnectTimeout = ConnectTimeout
	db := stdlib.OpenDB(*cfg)
	defer func() { _ = db.Close() }()
	db.SetMaxOpenConns(1)

	// The first thing a wrong URL, a closed port or a refused password fails: say so
	// plainly (the migration Job's termination message carries this error).
	if err := db.PingContext(ctx); err != nil {
		return 0, fmt.Errorf("connect to the database: %w", err)
	}
	if err := createSchema(ctx, db, schema); err != nil {
		return 0, err
	}
	provider, err := newProvider(db)
	if err != nil {
		return 0, err
	}
	if _, err := provider.Up(ctx); err != nil {
		return 0, fmt.Errorf("migrate schema %q: %w", schema, err)
	}
	v, err := provider.GetDBVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("read schema version of %q: %w", schema, err)
	}
	return v, nil
}

// createSchema creates schema under a transaction-scoped advisory lock: concurrent
// CREATE SCHEMA IF NOT EXISTS of one name can otherwise fail on the catalog's unique
// index, and goose's own lock is only taken after the schema exists.
func createSchema(ctx context.Context, db *sql.DB, schema string) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("create schema %q: %w", schema, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if _, err = tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext('hookkeeper.create_schema'))`); err != nil {
		return fmt.Errorf("lock schema creation: %w", err)
	}
	if _, err = tx.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return fmt.Errorf("create schema %q: %w", schema, err)
	}
	if err = tx.Commit(); err != nil {
		return fmt.Errorf("create schema %q: %w", schema, err)
	}
	return nil
}

// CurrentVersion reports the migration version of schema, 0 when never migrated.
func CurrentVersion(ctx context.Context, pool *pgxpool.Pool, schema string) (int64, error) {
	var v int64
	err := pool.QueryRow(ctx, fmt.Sprintf(
		`SELECT COALESCE(max(version_id), 0) FROM %s WHERE is_applied`,
		pgx.Identifier{schema, "goose_db_version"}.Sanitize())).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("read schema version of %q: %w", schema, err)
	}
	return v, nil
}

// ErrSchemaNotReady is wrapped by CheckSchema's errors: the database answers, but
// lacks the schema this binary needs.
var ErrSchemaNotReady = errors.New("database schema not ready")

// CheckSchema reports whether schema holds hookkeeper's tables at SchemaVersion or
// newer (a newer schema is fine: during an upgrade the migration runs before the new
// receivers replace the old ones). Its error says what is missing and how to fix it,
// wraps ErrSchemaNotReady when the database answered, and never contains the URL.
func CheckSchema(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, schema string) error {
	versions := pgx.Identifier{schema, "goose_db_version"}.Sanitize()
	var hasSchema, hasVersions bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1), to_regclass($2) IS NOT NULL`,
		schema, versions).Scan(&hasSchema, &hasVersions)
	if err != nil {
		return fmt.Errorf("check schema %q: %w", schema, err)
	}
	var version int64
	if hasVersions {
		err := db.QueryRow(ctx, `SELECT COALESCE(max(version_id), 0) FROM `+versions+` WHERE is_applied`).Scan(&version)
		if err != nil {
			return fmt.Errorf("read schema version of %q: %w", schema, err)
		}
	}
	switch {
	case !hasSchema:
		return fmt.Errorf("%w: schema %q does not exist; run hookkeeper migrate (the operator's migration Job) to create it at version %d",
			ErrSchemaNotReady, schema, SchemaVersion)
	case !hasVersions || version == 0:
		return fmt.Errorf("%w: schema %q has no hookkeeper migrations; run hookkeeper migrate to bring it to version %d",
			ErrSchemaNotReady, schema, SchemaVersion)
	case version < SchemaVersion:
		return fmt.Errorf("%w: schema %q is at version %d, this receiver needs %d; run hookkeeper migrate with this version",
			ErrSchemaNotReady, schema, version, SchemaVersion)
	}
	return nil
}

func newProvider(db *sql.DB) (*goose.Provider, error) {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, fmt.Errorf("create migration lock: %w", err)
	}
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return nil, fmt.Errorf("open embedded migrations: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, sub, goose.WithSessionLocker(locker))
	if err != nil {
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	return p, nil
}

func mustLatestVersion() int64 {
	entries, err := migrationFiles.ReadDir("migrations")
	if err != nil {
		panic(err)
	}
	var latest int64
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		if !ok {
			continue
		}
		v, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			panic(fmt.Sprintf("migration %s: version is not a number", e.Name()))
		}
		latest = max(latest, v)
	}
	return latest
}
