// Command demo is the demo without a cluster, as its own small program: `make dev` builds
// and runs it first on a fresh machine, because it compiles in a fraction of the time
// bin/hookkeeper and the control plane take (it links no Kubernetes client), so a
// newcomer sees the product within minutes. It does what `hookkeeper dev --cluster=false`
// does (internal/demo.RunLocal): the Stripe orders sample's receiver in process on
// PostgreSQL ($DATABASE_URL, else a throwaway server), the scripted signed webhooks, the
// table. Run it from the repository root (it reads config/samples).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/demo"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("get working directory: %w", err)
	}
	// The receiver's warnings and errors only, to stderr; the table goes to stdout.
	zcfg := zap.NewProductionConfig()
	zcfg.Level = zap.NewAtomicLevelAt(zapcore.WarnLevel)
	zl, err := zcfg.Build()
	if err != nil {
		return fmt.Errorf("build logger: %w", err)
	}
	defer func() { _ = zl.Sync() }()
	return demo.RunLocal(ctx, demo.LocalOptions{
		RepoRoot:    root,
		DatabaseURL: os.Getenv(config.EnvDatabaseURL),
		Out:         os.Stdout,
		Log:         zapr.NewLogger(zl),
	})
}
