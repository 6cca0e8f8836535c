// Command bench runs hookkeeper's benchmarks (`make bench`) and prints one table with
// the figures that docs/architecture.md ("Numbers we hold ourselves to") sets targets for.
// Suites run one after another in one process, so the figures in one table come from
// the same machine state.
//
//	go run ./test/bench -hookkeeper bin/hookkeeper -suite receiver
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hookkeeper/hookkeeper/internal/pgtemp"
)

func main() {
	// Deferred clean-ups (the throwaway server) run before the process exits.
	exitCode := 0
	defer func() { os.Exit(exitCode) }()
	var (
		suiteList   = flag.String("suite", "all", "comma-separated suites to run: "+fmt.Sprint(suiteNames())+" or all")
		databaseURL = flag.String("database-url", defaultDatabaseURL(), "PostgreSQL URL of a role that may CREATE DATABASE")
		binary      = flag.String("hookkeeper", "bin/hookkeeper-receiver", "path of the binary whose receiver subcommand is measured: bin/hookkeeper-receiver (what receiver pods run) or bin/hookkeeper")
		concurrency = flag.String("concurrency", "1,4,8,16,32,64", "comma-separated requests (and pgbench clients) in flight at once: the receiver suite measures each")
		phase       = flag.Duration("phase", 15*time.Second, "length of one measured phase")
		extraArgs   = flag.String("receiver-args", "", "extra space-separated flags for `hookkeeper receiver`, e.g. --log-level=error")
		setupSQL    = flag.String("receiver-database-setup", "", "SQL run in the receiver suite's database after its migrations, before any load: for experiments, e.g. dropping an index to measure what it costs")
		goMaxProcs  = flag.Int("receiver-gomaxprocs", podGoMaxProcs(), "GOMAXPROCS of the receiver, as a receiver pod with the default resources gets it (its CPU request, rounded up to whole CPUs); 0 for Go's default, the machine's cores")
		handwritten = flag.String("handwritten", "", "path of the built hand-written handler (./test/bench/handwritten); empty: go build it into a temporary directory")
		chart       = flag.String("chart", "bin/bench.svg", "where the receiver suite writes its SVG chart; empty for none")
		imageTool   = flag.String("image-tool", "bin/hookkeeper-image", "the image tool (make image builds it); the image suite asks it for the image's size")
		imageArch   = flag.String("image-archive", "bin/hookkeeper-linux-amd64.oci.tar", "the linux/amd64 OCI archive (make image-test-archive) whose size the image suite reports")
	)
	flag.Parse()
	logger := log.New(os.Stderr, "bench: ", log.Ltime)

	chosen, err := selectSuites(*suiteList)
	if err != nil {
		logger.Fatal(err)
	}
	levels, err := parseLevels(*concurrency)
	if err != nil {
		logger.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// A newcomer's machine may have PostgreSQL installed but not running: use a throwaway
	// server then, durable (fsync and synchronous_commit on) so commits cost what they
	// cost in production.
	adminURL := *databaseURL
	if os.Getenv("TEST_DATABASE_URL") == "" && pgtemp.Ping(ctx, adminURL) != nil {
		logger.Printf("no PostgreSQL at %s: starting a throwaway server from the local binaries", adminURL)
		pg, err := pgtemp.StartWith(ctx, pgtemp.Settings{Durable: true})
		if err != nil {
			logger.Fatal(err)
		}
		defer pg.Stop()
		adminURL = pg.URL
	}

	workDir, err := os.MkdirTemp("", "hookkeeper-bench-")
	if err != nil {
		logger.Print(err)
		exitCode = 1
		return
	}
	env := &Env{
		AdminURL:           adminURL,
		Hookkeeper:         *binary,
		Concurrency:        levels,
		Phase:              *phase,
		ReceiverArgs:       strings.Fields(*extraArgs),
		ReceiverSetupSQL:   *setupSQL,
		ReceiverGoMaxProcs: *goMaxProcs,
		Handwritten:        *handwritten,
		Chart:              *chart,
		ImageTool:          *imageTool,
		ImageArchive:       *imageArch,
		WorkDir:            workDir,
		Log:                logger,
	}

	var results []Result
	failed := false
	for _, s := range chosen {
		logger.Printf("suite %s: starting", s.Name)
		start := time.Now()
		rows, err := s.Run(ctx, env)
		results = append(results, Result{Suite: s.Name, Rows: rows, Err: err, Elapsed: time.Since(start)})
		if err != nil {
			failed = true
			logger.Printf("suite %s: %v", s.Name, err)
		}
		logger.Printf("suite %s: done in %s", s.Name, time.Since(start).Round(time.Second))
	}
	fmt.Println()
	printTable(os.Stdout, results)
	for _, out := range env.Outputs {
		fmt.Println("wrote", out)
	}
	if failed {
		logger.Printf("logs of the processes are in %s", workDir)
		stop()
		exitCode = 1
		return
	}
	_ = os.RemoveAll(workDir)
}

func defaultDatabaseURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// parseLevels reads -concurrency: positive integers, comma-separated.
func parseLevels(s string) ([]int, error) {
	var levels []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-concurrency: %q is not a positive integer", f)
		}
		levels = append(levels, n)
	}
	return levels, nil
}
