package store_test

import (
	"context"
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

// Open never echoes the URL (which carries the password) in its error.
func TestOpenDoesNotLeakPassword(t *testing.T) {
	_, err := store.Open(context.Background(), "postgres://u:s3cret-pass@127.0.0.1:1/db?sslmode=disable&connect_timeout=1", 2)
	if err == nil {
		t.Fatal("Open succeeded against a closed port")
	}
	if got := err.Error(); strings.Contains(got, "s3cret-pass") {
		t.Fatalf("error leaks the password: %s", got)
	}
}
