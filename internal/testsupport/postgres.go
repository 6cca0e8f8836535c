// Package testsupport gives tests the real parts they run against: a PostgreSQL server
// (TEST_DATABASE_URL, else 127.0.0.1:5432, else a throwaway server from local binaries)
// with a fresh database per test, and a kube-apiserver from envtest with hookkeeper's
// CRDs installed. Packages that use it call Main from TestMain.
package testsupport

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookkeeper/hookkeeper/internal/pgtemp"
	"github.com/hookkeeper/hookkeeper/internal/store"
)

// DefaultLocalURL is the server tried when TEST_DATABASE_URL is not set.
const DefaultLocalURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

var (
	serverOnce sync.Once
	serverURL  string
	serverErr  error
	throwaway  *pgtemp.Server
)

// Main runs the package's tests and then stops what this package started for them.
func Main(m *testing.M) {
	code := m.Run()
	stopEnvtest()
	if throwaway != nil {
		throwaway.Stop()
	}
	os.Exit(code)
}

// ServerURL returns an admin URL of a reachable PostgreSQL server, starting a throwaway
// one when neither TEST_DATABASE_URL nor the local default answers.
func ServerURL(tb testing.TB) string {
	tb.Helper()
	serverOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
			serverURL, serverErr = u, pgtemp.Ping(ctx, u)
			if serverErr != nil {
				serverErr = fmt.Errorf("TEST_DATABASE_URL is set but unreachable: %w", serverErr)
			}
			return
		}
		// TEST_POSTGRES=throwaway skips the local server: it is how CI proves the path a
		// newcomer's machine (PostgreSQL installed, not running) takes.
		if os.Getenv("TEST_POSTGRES") != "throwaway" && pgtemp.Ping(ctx, DefaultLocalURL) == nil {
			serverURL = DefaultLocalURL
			return
		}
		throwaway, serverErr = pgtemp.Start(ctx)
		if serverErr == nil {
			serverURL = throwaway.URL
		}
	})
	if serverErr != nil {
		tb.Fatalf("no PostgreSQL for tests: %v", serverErr)
	}
	return serverURL
}

// NewDatabase creates an empty database for this test and drops it when the test ends.
// It returns the database's URL.
func NewDatabase(tb testing.TB) string {
	tb.Helper()
	admin := ServerURL(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := "hk_" + sanitize(tb.Name()) + "_" + randomSuffix()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		tb.Fatalf("connect to test server: %v", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		tb.Fatalf("create test database %s: %v", name, err)
	}
	tb.Cleanup(func() { dropDatabase(tb, admin, name) })
	return withDatabase(admin, name)
}

// MigratedDatabase is NewDatabase with hookkeeper's schema migrated into schema.
func MigratedDatabase(tb testing.TB, schema string) string {
	tb.Helper()
	u := NewDatabase(tb)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := store.Migrate(ctx, u, schema); err != nil {
		tb.Fatalf("migrate test database: %v", err)
	}
	return u
}

// MigratedPool is MigratedDatabase with a pool of at most maxConns connections on it,
// opened as the receiver opens its own (store.Open) and closed when the test ends. It
// returns the database's URL and the pool.
func MigratedPool(tb testing.TB, schema string, maxConns int32) (string, *pgxpool.Pool) {
	tb.Helper()
	u := MigratedDatabase(tb, schema)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := store.Open(ctx, u, maxConns)
	if err != nil {
		tb.Fatalf("open pool: %v", err)
	}
	tb.Cleanup(pool.Close)
	return u, pool
}

func dropDatabase(tb testing.TB, admin, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		tb.Errorf("connect to drop %s: %v", name, err)
		return
	}
	defer func() { _ = conn.Close(ctx) }()
	// FORCE ends sessions a test left open (pools closed late, killed processes).
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		tb.Errorf("drop test database %s: %v", name, err)
	}
}

func withDatabase(admin, name string) string {
	u, err := url.Parse(admin)
	if err != nil {
		panic(fmt.Sprintf("test server URL is not a URL: %v", err))
	}
	u.Path = "/" + name
	return u.String()
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteRune('_')
		}
	}
	out := b.String()
	if len(out) > 40 {
		out = out[:40]
	}
	return out
}

func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
