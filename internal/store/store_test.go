package store_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookkeeper/hookkeeper/internal/store"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

func TestMain(m *testing.M) { testsupport.Main(m) }

// Concurrent migration Jobs (endpoints sharing a database and schema) must serialise on
// the advisory lock and all end at the latest version, with the tables in place.
func TestMigrateConcurrentlyIsSafeAndIdempotent(t *testing.T) {
	url := testsupport.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const jobs = 4
	var wg sync.WaitGroup
	versions := make([]int64, jobs)
	errs := make([]error, jobs)
	for i := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			versions[i], errs[i] = store.Migrate(ctx, url, "hooks")
		}()
	}
	wg.Wait()
	for i := range jobs {
		if errs[i] != nil {
			t.Fatalf("migration %d: %v", i, errs[i])
		}
		if versions[i] != store.SchemaVersion {
			t.Fatalf("migration %d reached version %d, want %d", i, versions[i], store.SchemaVersion)
		}
	}
	// A second run is a no-op at the same version.
	if v, err := store.Migrate(ctx, url, "hooks"); err != nil || v != store.SchemaVersion {
		t.Fatalf("re-run: version %d, err %v", v, err)
	}

	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if v, err := store.CurrentVersion(ctx, pool, "hooks"); err != nil || v != store.SchemaVersion {
		t.Fatalf("CurrentVersion = %d, %v", v, err)
	}
	tables := store.TablesIn("hooks")
	for _, table := range []string{tables.Events, tables.Entities, tables.Outbox} {
		if _, err := pool.Exec(ctx, "SELECT 1 FROM "+table+" LIMIT 1"); err != nil {
			t.Errorf("table %s: %v", table, err)
		}
	}
}

// The receipt's unique constraint is the dedupe arbiter: a second insert of the same
// (endpoint, event_id) inserts nothing.
func TestReceiptUniqueConstraint(t *testing.T) {
	url := testsupport.MigratedDatabase(t, "hookkeeper")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	insert := "INSERT INTO " + store.TablesIn("hookkeeper").Events +
		` (endpoint, event_id, payload, outcome) VALUES ('shop/orders', 'evt_1', '{}', 'applied')
		  ON CONFLICT (endpoint, event_id) DO NOTHING`
	for i, want := range []int64{1, 0} {
		tag, err := pool.Exec(ctx, insert)
		if err != nil {
			t.Fatalf("insert %d: %v", i, err)
		}
		if tag.RowsAffected() != want {
			t.Fatalf("insert %d affected %d rows, want %d", i, tag.RowsAffected(), want)
		}
	}
}

// Open never echoes the URL (which carries the password) in its error: not when the
// server is unreachable, not when the URL is malformed.
func TestOpenDoesNotLeakPassword(t *testing.T) {
	for name, url := range map[string]string{
		"closed port":   "postgres://u:s3cret-pass@127.0.0.1:1/db?sslmode=disable&connect_timeout=1",
		"malformed URL": "postgres://user:s3cret-pass@[bad",
	} {
		_, err := store.Open(context.Background(), url, 2)
		if err == nil {
			t.Fatalf("%s: Open succeeded", name)
		}
		if got := err.Error(); strings.Contains(got, "s3cret-pass") {
			t.Errorf("%s: error leaks the password: %s", name, got)
		}
	}
}

// Concurrent migration Jobs of endpoints sharing a database (and of one endpoint) are
// safe: every caller reaches SchemaVersion, and schemas keep separate histories.
func TestMigrateSchemasSharingADatabase(t *testing.T) {
	url := testsupport.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	schemas := []string{"alpha", "alpha", "beta", "beta"}
	versions := make([]int64, len(schemas))
	errs := make([]error, len(schemas))
	var wg sync.WaitGroup
	for i, s := range schemas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			versions[i], errs[i] = store.Migrate(ctx, url, s)
		}()
	}
	wg.Wait()
	for i := range schemas {
		if errs[i] != nil {
			t.Fatalf("migrate %s: %v", schemas[i], errs[i])
		}
		if versions[i] != store.SchemaVersion {
			t.Fatalf("migrate %s reached %d, want %d", schemas[i], versions[i], store.SchemaVersion)
		}
	}
	if store.SchemaVersion < 2 {
		t.Fatalf("SchemaVersion = %d, want the embedded 00002 included", store.SchemaVersion)
	}

	pool, err := store.Open(ctx, url, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, s := range []string{"alpha", "beta"} {
		v, err := store.CurrentVersion(ctx, pool, s)
		if err != nil || v != store.SchemaVersion {
			t.Fatalf("CurrentVersion(%s) = %d, %v", s, v, err)
		}
		tables := store.TablesIn(s)
		for _, table := range []string{tables.Events, tables.Entities, tables.Outbox, tables.EntityClocks} {
			if _, err := pool.Exec(ctx, "SELECT 1 FROM "+table+" LIMIT 1"); err != nil {
				t.Fatalf("table %s: %v", table, err)
			}
		}
		var amount bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM information_schema.columns
			WHERE table_schema = $1 AND table_name = 'webhook_events' AND column_name = 'amount')`, s).Scan(&amount); err != nil || !amount {
			t.Fatalf("webhook_events.amount in %s: %v %v", s, amount, err)
		}
	}
	// Running again is a no-op.
	if v, err := store.Migrate(ctx, url, "alpha"); err != nil || v != store.SchemaVersion {
		t.Fatalf("second migrate = %d, %v", v, err)
	}
}

// A migration against a server that accepts the connection and never answers (a wrong
// port that happens to be open, a hung proxy) fails within store.ConnectTimeout and says
// so, instead of holding the migration Job until its own five-minute deadline.
func TestMigrateGivesUpOnAServerThatNeverAnswers(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	began := time.Now()
	_, err = store.Migrate(ctx, "postgres://postgres@"+ln.Addr().String()+"/x?sslmode=disable", "hk")
	took := time.Since(began)
	if err == nil || !strings.Contains(err.Error(), "connect to the database") {
		t.Fatalf("migrate against a silent server: %v, want a connect error", err)
	}
	if took > 3*store.ConnectTimeout {
		t.Errorf("gave up after %s, want about store.ConnectTimeout (%s)", took.Round(time.Millisecond), store.ConnectTimeout)
	}
}
