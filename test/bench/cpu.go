package main

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// backendSampler follows the CPU time of a database's PostgreSQL backends during a
// phase. Backends come and go (pgbench connects at its start and leaves at its end), so
// it samples /proc every interval and keeps each backend's last value; a backend first
// seen after the start counts whole.
type backendSampler struct {
	stop chan struct{}
	done chan error
	base map[int]time.Duration
	last map[int]time.Duration
}

const sampleInterval = 200 * time.Millisecond

// sampleBackends starts sampling the backends of db's database other than db's own.
// db must not be used by anyone else until Stop.
func sampleBackends(ctx context.Context, db *pgx.Conn) (*backendSampler, error) {
	s := &backendSampler{stop: make(chan struct{}), done: make(chan error, 1),
		base: map[int]time.Duration{}, last: map[int]time.Duration{}}
	if err := s.sample(ctx, db); err != nil {
		return nil, err
	}
	for pid, t := range s.last {
		s.base[pid] = t
	}
	go func() {
		tick := time.NewTicker(sampleInterval)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				s.done <- s.sample(ctx, db)
				return
			case <-tick.C:
				if err := s.sample(ctx, db); err != nil {
					s.done <- err
					return
				}
			}
		}
	}()
	return s, nil
}

func (s *backendSampler) sample(ctx context.Context, db *pgx.Conn) error {
	rows, err := db.Query(ctx, `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	if err != nil {
		return fmt.Errorf("list backends: %w", err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return fmt.Errorf("list backends: %w", err)
	}
	for _, pid := range pids {
		// A backend that has just left has no /proc entry: its last sample stands.
		if t, err := procCPU(int(pid)); err == nil {
			s.last[int(pid)] = t
		}
	}
	return nil
}

// Stop ends sampling and returns the backends' CPU time since the start.
func (s *backendSampler) Stop() (time.Duration, error) {
	close(s.stop)
	if err := <-s.done; err != nil {
		return 0, err
	}
	var d time.Duration
	for pid, t := range s.last {
		d += t - s.base[pid]
	}
	return d, nil
}

// selfCPU is this process's CPU time so far (the load generator's, during a phase).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// phaseCPU is the CPU time each party used during one phase.
type phaseCPU struct {
	client   time.Duration // the load generator (this process) or pgbench
	receiver time.Duration // the receiver subprocess; zero for pgbench
	database time.Duration // the bench database's backends
}

// measureCPU runs phase and returns what this process, proc (when not nil) and db's
// backends spent on it.
func measureCPU(ctx context.Context, db *pgx.Conn, proc *Process, phase func()) (phaseCPU, error) {
	sampler, err := sampleBackends(ctx, db)
	if err != nil {
		return phaseCPU{}, err
	}
	var rx0 time.Duration
	if proc != nil {
		if rx0, err = proc.CPUTime(); err != nil {
			_, _ = sampler.Stop()
			return phaseCPU{}, err
		}
	}
	self0 := selfCPU()
	phase()
	use := phaseCPU{client: selfCPU() - self0}
	if proc != nil {
		rx1, err := proc.CPUTime()
		if err != nil {
			_, _ = sampler.Stop()
			return phaseCPU{}, err
		}
		use.receiver = rx1 - rx0
	}
	if use.database, err = sampler.Stop(); err != nil {
		return phaseCPU{}, err
	}
	return use, nil
}

// per divides each figure by n events.
func (c phaseCPU) per(n int) phaseCPU {
	if n <= 0 {
		return phaseCPU{}
	}
	d := time.Duration(n)
	return phaseCPU{client: c.client / d, receiver: c.receiver / d, database: c.database / d}
}

func (c phaseCPU) add(o phaseCPU) phaseCPU {
	return phaseCPU{client: c.client + o.client, receiver: c.receiver + o.receiver, database: c.database + o.database}
}

func (c phaseCPU) total() time.Duration { return c.client + c.receiver + c.database }

func us(d time.Duration) string { return fmt.Sprintf("%dµs", d.Microseconds()) }
