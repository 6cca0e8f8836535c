package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/dataplanecmd"
	"github.com/hookkeeper/hookkeeper/internal/loopback"
	"github.com/hookkeeper/hookkeeper/internal/pgtemp"
	"github.com/hookkeeper/hookkeeper/internal/receipt"
	"github.com/hookkeeper/hookkeeper/internal/store"
)

// LocalOptions configures RunLocal.
type LocalOptions struct {
	// RepoRoot is where the samples are read from.
	RepoRoot string
	// DatabaseURL is the PostgreSQL to use; empty starts a throwaway server.
	DatabaseURL string
	Out         io.Writer
	Log         logr.Logger
}

// RunLocal is the demo without a cluster: the Stripe orders sample's receiver, with
// its dispatcher, runs in this process on PostgreSQL, exactly as a receiver pod would
// (the same manifest, Secrets, migration and code), and the scripted webhooks go to it.
// It needs seconds, where the cluster first needs its control plane built: `make dev`
// shows it while nothing else is ready yet.
func RunLocal(ctx context.Context, opts LocalOptions) (err error) {
	out := opts.Out
	begin := time.Now()
	fmt.Fprintln(out, "demo without a cluster: the Stripe orders sample's receiver in this process, on PostgreSQL")
	databaseURL := opts.DatabaseURL
	if databaseURL == "" {
		pg, err := pgtemp.Start(ctx)
		if err != nil {
			return fmt.Errorf("start a throwaway PostgreSQL (or set %s): %w", config.EnvDatabaseURL, err)
		}
		defer pg.Stop()
		databaseURL = pg.URL
		fmt.Fprintf(out, "postgresql (throwaway) up in %.1fs\n", time.Since(begin).Seconds())
	}
	if err := SeedOrders(ctx, databaseURL); err != nil {
		return err
	}
	sink, err := StartSink(ctx, opts.Log.WithName("sink"))
	if err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = sink.Stop(stopCtx)
	}()

	we, getenv, secret, err := localSample(opts.RepoRoot, databaseURL, sink.URL()+"/events")
	if err != nil {
		return err
	}
	ep, err := config.Compile(we, getenv)
	if err != nil {
		return err
	}
	version, err := store.Migrate(ctx, databaseURL, ep.Spec.Database.Schema)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	fmt.Fprintf(out, "schema %q at version %d\n", ep.Spec.Database.Schema, version)

	webhookAddr, err := loopback.FreeAddr(ctx)
	if err != nil {
		return err
	}
	adminAddr, err := loopback.FreeAddr(ctx)
	if err != nil {
		return err
	}
	serveCtx, stopServing := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() {
		served <- dataplanecmd.Serve(serveCtx, dataplanecmd.ServeOptions{
			Endpoint:        ep,
			Getenv:          getenv,
			Dispatcher:      true,
			GroupCommit:     receipt.DefaultGroupCommit,
			WebhookAddr:     webhookAddr,
			AdminAddr:       adminAddr,
			ShutdownTimeout: 10 * time.Second,
			Log:             opts.Log.WithName("receiver"),
		})
	}()
	defer func() {
		// The client's idle connections include ones it dialled for the burst of copies
		// and never used: the server counts such a connection as in flight for five
		// seconds and its shutdown would wait for it. Closing them first lets the
		// receiver stop at once.
		demoClient.CloseIdleConnections()
		stopServing()
		if serveErr := <-served; serveErr != nil && err == nil {
			err = fmt.Errorf("receiver: %w", serveErr)
		}
	}()
	if err := waitReceiverReady(ctx, "http://"+adminAddr+"/readyz", served); err != nil {
		return err
	}
	fmt.Fprintf(out, "receiver ready in %.1fs on http://%s%s\n", time.Since(begin).Seconds(), webhookAddr, ep.Spec.Receiver.Path)
	return Run(ctx, Target{
		URL:         "http://" + webhookAddr + ep.Spec.Receiver.Path,
		Secret:      secret,
		Endpoint:    ep.Key(),
		Schema:      ep.Spec.Database.Schema,
		DatabaseURL: databaseURL,
		Sink:        sink,
	}, out)
}

// localSample reads the Stripe orders sample and its Secrets from the repository, points
// them at databaseURL and sinkURL as the cluster session does, and returns the endpoint,
// the environment its receiver pod would have, and its signing secret.
func localSample(repoRoot, databaseURL, sinkURL string) (*v1alpha1.WebhookEndpoint, func(string) string, string, error) {
	secrets := map[string]*corev1.Secret{}
	var we *v1alpha1.WebhookEndpoint
	for _, rel := range SampleFiles {
		docs, err := ReadManifests(filepath.Join(repoRoot, rel))
		if err != nil {
			return nil, nil, "", err
		}
		for _, u := range docs {
			var obj interface{ SetNamespace(string) }
			switch u.GetKind() {
			case "Secret":
				s := &corev1.Secret{}
				secrets[u.GetName()], obj = s, s
			case "WebhookEndpoint":
				obj = &v1alpha1.WebhookEndpoint{}
			default:
				continue
			}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
				return nil, nil, "", fmt.Errorf("%s: convert %s %s: %w", rel, u.GetKind(), u.GetName(), err)
			}
			Rewire(obj, databaseURL, sinkURL)
			obj.SetNamespace(SampleNamespace)
			if e, ok := obj.(*v1alpha1.WebhookEndpoint); ok && e.Spec.Provider.Type == v1alpha1.ProviderStripe {
				we = e
			}
		}
	}
	if we == nil {
		return nil, nil, "", errors.New("the samples have no Stripe endpoint")
	}
	// As the API server would: defaults first (config.Compile defaults the spec it keeps,
	// but the Secret references are read from this copy).
	we.Spec.Default()
	lookup := func(name, key string) (string, error) {
		s, ok := secrets[name]
		if !ok {
			return "", fmt.Errorf("the samples have no Secret %q", name)
		}
		if v, ok := s.StringData[key]; ok {
			return v, nil
		}
		if v, ok := s.Data[key]; ok {
			return string(v), nil
		}
		return "", fmt.Errorf("the sample Secret %q has no key %q", name, key)
	}
	getenv, err := config.EnvFromSecrets(we, lookup, nil, time.Now())
	if err != nil {
		return nil, nil, "", err
	}
	if len(we.Spec.SigningSecrets) == 0 {
		return nil, nil, "", errors.New("the Stripe sample has no signing secret")
	}
	return we, getenv, getenv(config.EnvSigningSecretPrefix + "0"), nil
}

// waitReceiverReady polls the receiver's /readyz until it answers 200, the receiver
// stops (its error is returned) or 30 seconds pass.
func waitReceiverReady(ctx context.Context, readyz string, served <-chan error) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, readyz, nil)
		if err != nil {
			return fmt.Errorf("build readiness request: %w", err)
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-served:
			return fmt.Errorf("receiver stopped before it was ready: %w", err)
		case <-ctx.Done():
			return fmt.Errorf("wait for the receiver to be ready (%s): %w", readyz, ctx.Err())
		case <-tick.C:
		}
	}
}
