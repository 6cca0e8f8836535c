package refetch

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
)

// Options are the knobs of a Refetcher that the manifest does not carry.
type Options struct {
	// APIVersion is sent as Stripe-Version when set.
	APIVersion string
	// CacheTTL: DefaultCacheTTL when zero, no cache when negative.
	CacheTTL time.Duration
	// Client sends the requests; a client of its own when nil.
	Client *http.Client
	Logger logr.Logger
}

// Refetcher is an endpoint's spec.provider.refetch: which transitions re-fetch, and the
// fetcher that does it. A nil *Refetcher re-fetches nothing.
type Refetcher struct {
	Fetcher
	transitions map[string]bool
}

// FromEnv builds the Refetcher of provider, with the API key from config.EnvRefetchAPIKey.
// It returns nil (and no error) when provider has no refetch block.
func FromEnv(provider v1alpha1.ProviderSpec, getenv func(string) string, opts Options) (*Refetcher, error) {
	if provider.Refetch == nil {
		return nil, nil
	}
	key := getenv(config.EnvRefetchAPIKey)
	if key == "" {
		return nil, fmt.Errorf("refetch: %s is not set (spec.provider.refetch.apiKeySecretRef)", config.EnvRefetchAPIKey)
	}
	return New(provider, key, opts)
}

// New builds the Refetcher of provider with apiKey. It returns nil (and no error) when
// provider has no refetch block. Errors never contain the key.
func New(provider v1alpha1.ProviderSpec, apiKey string, opts Options) (*Refetcher, error) {
	spec := provider.Refetch
	if spec == nil {
		return nil, nil
	}
	if provider.Type != v1alpha1.ProviderStripe {
		return nil, fmt.Errorf("refetch: provider type %s is not supported; Stripe is", provider.Type)
	}
	if len(spec.Transitions) == 0 {
		return nil, errors.New("refetch: spec.provider.refetch.transitions is empty")
	}
	timeout := v1alpha1.DefaultRefetchTimeout
	if spec.Timeout != nil && spec.Timeout.Duration > 0 {
		timeout = spec.Timeout.Duration
	}
	s, err := NewStripe(StripeOptions{
		APIKey:  apiKey,
		BaseURL: spec.BaseURL,
		// Only a spec that says so sends the key over plain http.
		AllowInsecureHTTP: spec.AllowInsecureHTTP,
		APIVersion:        opts.APIVersion,
		Timeout:           timeout,
		CacheTTL:          opts.CacheTTL,
		Client:            opts.Client,
		Logger:            opts.Logger,
	})
	if err != nil {
		return nil, err
	}
	r := &Refetcher{Fetcher: s, transitions: make(map[string]bool, len(spec.Transitions))}
	for _, t := range spec.Transitions {
		r.transitions[t] = true
	}
	return r, nil
}

// Needs reports whether the transition named transitionName re-fetches. Transitions
// that are not listed never call the provider.
func (r *Refetcher) Needs(transitionName string) bool {
	return r != nil && r.transitions[transitionName]
}
