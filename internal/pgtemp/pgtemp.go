// Package pgtemp starts a throwaway PostgreSQL server from the binaries installed on the
// machine (initdb, pg_ctl), for tests and for `hookkeeper dev` on machines where no
// server runs. Everything lives in one temporary directory that Stop removes.
package pgtemp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookkeeper/hookkeeper/internal/loopback"
)

// Server is a running throwaway PostgreSQL server.
type Server struct {
	// URL connects as the superuser "postgres" to the "postgres" database.
	URL string

	dir     string
	pgCtl   string
	cred    *syscall.Credential
	logOut  string
	options string
}

// Settings tune a throwaway server.
type Settings struct {
	// Durable keeps fsync and synchronous_commit on, so a crash (see Crash) loses no
	// acknowledged commit. Off by default: tests that never crash the server run faster.
	Durable bool
	// MaxConnections is the server's max_connections; DefaultMaxConnections when zero.
	MaxConnections int
}

// DefaultMaxConnections is a throwaway server's max_connections.
const DefaultMaxConnections = 300

// BinDir finds the directory holding initdb and pg_ctl: PATH first, then the Debian and
// RPM layouts, newest version first.
func BinDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if _, err := exec.LookPath("pg_ctl"); err == nil {
			return filepath.Dir(p), nil
		}
	}
	var candidates []string
	for _, pattern := range []string{"/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin", "/usr/local/pgsql/bin"} {
		m, _ := filepath.Glob(pattern)
		candidates = append(candidates, m...)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(candidates)))
	for _, dir := range candidates {
		if fileExists(filepath.Join(dir, "initdb")) && fileExists(filepath.Join(dir, "pg_ctl")) {
			return dir, nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries found (initdb, pg_ctl): install PostgreSQL " +
		"(Debian/Ubuntu: apt-get install postgresql; macOS: brew install postgresql) or set TEST_DATABASE_URL")
}

// Start initialises a cluster in a new temporary directory and starts it on a free
// loopback port. PostgreSQL refuses to run as root, so as root the server runs as the
// "postgres" system user.
func Start(ctx context.Context) (*Server, error) {
	return StartWith(ctx, Settings{})
}

// StartWith is Start with settings.
func StartWith(ctx context.Context, settings Settings) (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "hookkeeper-pg-")
	if err != nil {
		return nil, fmt.Errorf("create temp dir: %w", err)
	}
	s := &Server{dir: dir, pgCtl: filepath.Join(bin, "pg_ctl"), logOut: filepath.Join(dir, "server.log")}
	if os.Geteuid() == 0 {
		cred, err := postgresUser()
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		s.cred = cred
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("chown %s: %w", dir, err)
		}
	}
	data := filepath.Join(dir, "data")
	if out, err := s.run(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %w: %s", err, out)
	}
	port, err := loopback.FreePort(ctx)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	maxConns := settings.MaxConnections
	if maxConns <= 0 {
		maxConns = DefaultMaxConnections
	}
	s.options = fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=%d", port, dir, maxConns)
	if !settings.Durable {
		s.options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
	}
	if out, err := s.run(ctx, s.pgCtl, "-D", data, "-l", s.logOut, "-o", s.options, "-w", "-t", "60", "start"); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("pg_ctl start: %w: %s", err, out)
	}
	s.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	if err := waitReady(ctx, s.URL); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// Crash stops the server the way a power cut or kill -9 would (immediate mode: no
// checkpoint, crash recovery on the next start) and starts it again on the same port.
// Reliability tests use it to show that nothing acknowledged is lost.
func (s *Server) Crash(ctx context.Context) error {
	data := filepath.Join(s.dir, "data")
	if out, err := s.run(ctx, s.pgCtl, "-D", data, "-m", "immediate", "-w", "stop"); err != nil {
		return fmt.Errorf("pg_ctl stop: %w: %s", err, out)
	}
	if out, err := s.run(ctx, s.pgCtl, "-D", data, "-l", s.logOut, "-o", s.options, "-w", "-t", "60", "start"); err != nil {
		return fmt.Errorf("pg_ctl start: %w: %s", err, out)
	}
	return waitReady(ctx, s.URL)
}

// Stop shuts the server down immediately and removes its directory.
func (s *Server) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = s.run(ctx, s.pgCtl, "-D", filepath.Join(s.dir, "data"), "-m", "immediate", "-w", "stop")
	_ = os.RemoveAll(s.dir)
}

func (s *Server) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...) //nolint:gosec // name is initdb/pg_ctl from BinDir
	cmd.Dir = s.dir
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd.CombinedOutput()
}

func postgresUser() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, errors.New("running as root and no 'postgres' user exists: PostgreSQL cannot run as root; " +
			"run as a normal user or create the postgres user")
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// Ping says whether a PostgreSQL server accepts a connection at url within 3 seconds:
// how the tests and the benchmarks decide that they need a throwaway server.
func Ping(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	return c.Close(ctx)
}

func waitReady(ctx context.Context, url string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := Ping(ctx, url)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("throwaway PostgreSQL did not accept connections: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
