// Package config turns a WebhookEndpoint into a compiled, validated Endpoint: the
// signature verifier, the event extractor (CEL programs compiled once), the state machine
// and the database settings. The receiver builds one at start with Load and uses it per
// request; the operator calls Validate and reports its message in ConfigValid.
//
// # Event extraction
//
// Each field of spec.event is a CEL expression over `body` (the parsed JSON payload;
// integral numbers are int), `headers` (lower-cased names, first value, without
// credentials or signatures) and `signed` (what the signature covered besides the body).
// A field left empty takes the provider's preset, declared in the provider's file in
// internal/provider and tabled in docs/providers.md.
//
// id and type are required (a payload without them is a 400). entityKey, amount and
// occurredAt are optional: an expression that fails on a payload leaves the field empty.
// id and entityKey may be strings or integers (Shopify ids); amount an integer (or a
// whole double or a decimal string) in minor units; occurredAt a CEL timestamp, Unix
// seconds, or an RFC 3339 string.
//
// # Secrets and environment
//
// Load takes the manifest from a file (`--endpoint FILE`, YAML or JSON) or from
// EnvEndpoint, and everything secret from the environment (env.go): signing secret i
// from EnvSigningSecretPrefix+i, the database URL from EnvDatabaseURL, the delivery key
// from EnvDeliverySecret. A signing secret whose variable is empty fails Load, unless its
// expiresAt has passed (the operator drops expired secrets), so a receiver never starts
// with fewer secrets than its manifest promises. EnvFromSecrets builds the same
// variables from the Secrets the object references instead (`hookkeeper replay NAME`,
// which reads them through the user's kubeconfig).
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/expr"
	"github.com/hookkeeper/hookkeeper/internal/provider"
	"github.com/hookkeeper/hookkeeper/internal/signature"
	"github.com/hookkeeper/hookkeeper/internal/statemachine"
	"github.com/hookkeeper/hookkeeper/internal/store"
)

// Endpoint is a compiled, validated endpoint; built once at start, used per request.
type Endpoint struct {
	Name, Namespace string
	// Spec has Go-side defaults applied (the CRD's default values).
	Spec      v1alpha1.WebhookEndpointSpec
	Verifier  signature.Verifier
	Extractor *Extractor
	Machine   *statemachine.Machine
	Tables    store.Tables
	// DatabaseURL is secret: never log it.
	DatabaseURL string
	// DeliverySecret signs deliveries (Standard Webhooks); empty means unsigned.
	DeliverySecret string
	// SinkURL is EnvSinkURL when set, else spec.delivery.sink.url, else the in-cluster
	// URL of spec.delivery.sink.serviceRef.
	SinkURL string
}

// Key is "namespace/name", the value of the `endpoint` column of every table.
func (e *Endpoint) Key() string { return e.Namespace + "/" + e.Name }

// ParkFor is spec.stateMachine.parkFor (v1alpha1.DefaultParkFor when absent); 0 turns parking off.
func (e *Endpoint) ParkFor() time.Duration {
	if d := e.Spec.StateMachine.ParkFor; d != nil {
		return d.Duration
	}
	return v1alpha1.DefaultParkFor
}

// ReadManifest reads a WebhookEndpoint from manifestFile (YAML or JSON), or from the
// EnvEndpoint variable when manifestFile is empty, and applies the defaults. Unknown
// fields are errors, so a typo in a hand-written manifest is not silently ignored. An
// empty namespace becomes "default".
func ReadManifest(manifestFile string, getenv func(string) string) (*v1alpha1.WebhookEndpoint, error) {
	var data []byte
	source := EnvEndpoint
	if manifestFile != "" {
		b, err := os.ReadFile(manifestFile) //nolint:gosec // the path is the operator's own --endpoint flag
		if err != nil {
			return nil, fmt.Errorf("read endpoint manifest: %w", err)
		}
		data, source = b, manifestFile
	} else {
		data = []byte(getenv(EnvEndpoint))
		if len(strings.TrimSpace(string(data))) == 0 {
			return nil, fmt.Errorf("no endpoint: pass --endpoint FILE or set %s", EnvEndpoint)
		}
	}
	we, err := decodeManifest(data)
	if err != nil {
		return nil, fmt.Errorf("parse endpoint manifest from %s: %w", source, err)
	}
	if we.APIVersion != "" && we.APIVersion != v1alpha1.GroupVersion.String() {
		return nil, fmt.Errorf("endpoint manifest from %s: apiVersion is %q, want %q", source, we.APIVersion, v1alpha1.GroupVersion.String())
	}
	if we.Kind != "" && we.Kind != "WebhookEndpoint" {
		return nil, fmt.Errorf("endpoint manifest from %s: kind is %q, want WebhookEndpoint", source, we.Kind)
	}
	if we.Name == "" {
		return nil, fmt.Errorf("endpoint manifest from %s: metadata.name is required", source)
	}
	if we.Namespace == "" {
		we.Namespace = "default"
	}
	we.Spec.Default()
	return we, nil
}

// decodeManifest parses YAML 1.2 (so a transition's `on:` key stays the string "on"; a
// YAML 1.1 parser such as sigs.k8s.io/yaml turns it into "true") or JSON, and decodes it
// strictly: unknown fields are errors.
func decodeManifest(data []byte) (*v1alpha1.WebhookEndpoint, error) {
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	asJSON, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(asJSON))
	dec.DisallowUnknownFields()
	var we v1alpha1.WebhookEndpoint
	if err := dec.Decode(&we); err != nil {
		return nil, err
	}
	return &we, nil
}

// Load reads the manifest (see ReadManifest), validates and compiles it, and takes the
// secrets and database URL from getenv (names in env.go). Errors never contain secret
// values.
func Load(manifestFile string, getenv func(string) string) (*Endpoint, error) {
	we, err := ReadManifest(manifestFile, getenv)
	if err != nil {
		return nil, err
	}
	return Compile(we, getenv)
}

// Compile builds an Endpoint from a defaulted WebhookEndpoint and the environment.
func Compile(we *v1alpha1.WebhookEndpoint, getenv func(string) string) (*Endpoint, error) {
	return compile(we, getenv, true)
}

// CompileStored is Compile for work on receipts that were verified when they arrived
// (replay, reprocessing): it builds no signature verifier (Endpoint.Verifier is nil), so
// an endpoint whose signing secrets have all expired can still replay what it stored.
func CompileStored(we *v1alpha1.WebhookEndpoint, getenv func(string) string) (*Endpoint, error) {
	return compile(we, getenv, false)
}

func compile(we *v1alpha1.WebhookEndpoint, getenv func(string) string, verify bool) (*Endpoint, error) {
	spec := *we.Spec.DeepCopy()
	spec.Default()
	x, m, err := compileSpec(&spec)
	if err != nil {
		return nil, fmt.Errorf("endpoint %s/%s is invalid: %w", we.Namespace, we.Name, err)
	}
	ep := &Endpoint{
		Name: we.Name, Namespace: we.Namespace, Spec: spec,
		Extractor: x, Machine: m,
		Tables:         store.TablesIn(spec.Database.Schema),
		DatabaseURL:    getenv(EnvDatabaseURL),
		DeliverySecret: getenv(EnvDeliverySecret),
	}
	if ep.DatabaseURL == "" {
		return nil, fmt.Errorf("%s is not set", EnvDatabaseURL)
	}
	ep.SinkURL = sinkURL(spec.Delivery.Sink, we.Namespace, getenv(EnvSinkURL))
	if !verify {
		return ep, nil
	}
	secrets, err := signingSecrets(spec.SigningSecrets, getenv, time.Now())
	if err != nil {
		return nil, err
	}
	if ep.Verifier, err = provider.NewVerifier(spec.Provider, secrets); err != nil {
		return nil, fmt.Errorf("build %s signature verifier: %w", spec.Provider.Type, err)
	}
	return ep, nil
}

func signingSecrets(specs []v1alpha1.SigningSecret, getenv func(string) string, now time.Time) ([]signature.Secret, error) {
	var out []signature.Secret
	for i, s := range specs {
		name := EnvSigningSecretPrefix + strconv.Itoa(i)
		var expires time.Time
		if s.ExpiresAt != nil {
			expires = s.ExpiresAt.Time
		}
		v := getenv(name)
		if v == "" {
			if !expires.IsZero() && !now.Before(expires) {
				continue
			}
			return nil, fmt.Errorf("signing secret %d (%s, from spec.signingSecrets[%d]) is empty", i, name, i)
		}
		out = append(out, signature.Secret{Value: v, ExpiresAt: expires})
	}
	if len(out) == 0 {
		return nil, errors.New("no active signing secret: every spec.signingSecrets entry has expired")
	}
	return out, nil
}

func sinkURL(sink v1alpha1.SinkSpec, namespace, override string) string {
	switch {
	case override != "":
		return override
	case sink.URL != "":
		return sink.URL
	case sink.ServiceRef != nil:
		return sink.ServiceRef.URL(namespace)
	}
	return ""
}

// ValidationError lists every problem Validate found, each naming its spec field.
type ValidationError struct {
	Problems []error
}

// Error joins the problems with "; " so the message fits one condition message.
func (e *ValidationError) Error() string {
	msgs := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		msgs[i] = p.Error()
	}
	return strings.Join(msgs, "; ")
}

// Unwrap exposes the problems to errors.Is/As.
func (e *ValidationError) Unwrap() []error { return e.Problems }

// Validate checks everything Go can check without secrets: CEL compiles with the right
// result types, the HMAC template, the state machine, the database and delivery
// settings. It returns nil or a *ValidationError whose message names each field, e.g.
// `spec.stateMachine.transitions[capture].guard: undeclared reference to 'entty' (at
// 1:1)`. we is not modified.
func Validate(we *v1alpha1.WebhookEndpoint) error {
	spec := *we.Spec.DeepCopy()
	spec.Default()
	_, _, err := compileSpec(&spec)
	return err
}

// compileSpec validates a defaulted spec and compiles its CEL programs.
func compileSpec(spec *v1alpha1.WebhookEndpointSpec) (*Extractor, *statemachine.Machine, error) {
	var problems []error
	add := func(err error) {
		if err == nil {
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			problems = append(problems, j.Unwrap()...)
			return
		}
		problems = append(problems, err)
	}
	add(validateProvider(spec))
	x, err := NewExtractor(*spec)
	add(err)
	var refetch []string
	if spec.Provider.Refetch != nil {
		refetch = spec.Provider.Refetch.Transitions
	}
	m, err := statemachine.Compile(spec.StateMachine, refetch)
	add(err)
	add(validateDatabase(spec))
	add(validateDelivery(spec))
	add(validateReceiver(spec))
	add(validateExposure(spec))
	add(validateRetention(spec))
	if len(problems) > 0 {
		return nil, nil, &ValidationError{Problems: problems}
	}
	return x, m, nil
}

var (
	schemaName          = regexp.MustCompile(v1alpha1.SchemaPattern)
	onUnmatchedPolicies = map[v1alpha1.OnUnmatched]bool{v1alpha1.UnmatchedRecord: true, v1alpha1.UnmatchedRetry: true, v1alpha1.UnmatchedCreate: true}
)

func validateProvider(spec *v1alpha1.WebhookEndpointSpec) error {
	errs := provider.Validate(spec.Provider)
	p := spec.Provider
	if d := spec.StateMachine.ParkFor; d != nil && (d.Duration < 0 || d.Duration > v1alpha1.MaxParkFor) {
		errs = append(errs, expr.Errorf("spec.stateMachine.parkFor", "must be between 0s and %s (one year), got %s", v1alpha1.MaxParkFor, d.Duration))
	}
	if r := p.Refetch; r != nil && r.BaseURL != "" {
		if err := httpURL(r.BaseURL); err != nil {
			errs = append(errs, expr.Errorf("spec.provider.refetch.baseURL", "%v", err))
		} else if u, _ := url.Parse(r.BaseURL); u.Scheme != "https" && !r.AllowInsecureHTTP {
			// The API key goes to this URL: never in clear text unless a test asks.
			errs = append(errs, expr.Errorf("spec.provider.refetch.baseURL",
				"must be https (it receives the API key); set spec.provider.refetch.allowInsecureHTTP for a local http stand-in"))
		}
	}
	if n := len(spec.SigningSecrets); n < v1alpha1.MinSigningSecrets || n > v1alpha1.MaxSigningSecrets {
		errs = append(errs, expr.Errorf("spec.signingSecrets", "needs %d to %d secrets, got %d", v1alpha1.MinSigningSecrets, v1alpha1.MaxSigningSecrets, n))
	}
	for i, s := range spec.SigningSecrets {
		if s.SecretKeyRef.Name == "" || s.SecretKeyRef.Key == "" {
			errs = append(errs, expr.Errorf(fmt.Sprintf("spec.signingSecrets[%d].secretKeyRef", i), "name and key are required"))
		}
	}
	return errors.Join(errs...)
}

func validateDatabase(spec *v1alpha1.WebhookEndpointSpec) error {
	var errs []error
	d := spec.Database
	if d.URLSecretRef.Name == "" || d.URLSecretRef.Key == "" {
		errs = append(errs, expr.Errorf("spec.database.urlSecretRef", "name and key are required"))
	}
	if !schemaName.MatchString(d.Schema) {
		errs = append(errs, expr.Errorf("spec.database.schema", "%q must match %s", d.Schema, schemaName))
	}
	if d.MaxConnections < v1alpha1.MinMaxConnections || d.MaxConnections > v1alpha1.MaxMaxConnections {
		errs = append(errs, expr.Errorf("spec.database.maxConnections", "must be between %d and %d, got %d", v1alpha1.MinMaxConnections, v1alpha1.MaxMaxConnections, d.MaxConnections))
	}
	e := spec.Entity
	if !onUnmatchedPolicies[e.OnUnmatched] {
		errs = append(errs, expr.Errorf("spec.entity.onUnmatched", "unknown policy %q (Record, Retry or Create)", e.OnUnmatched))
	}
	if t := e.Table; t != nil {
		if e.OnUnmatched == v1alpha1.UnmatchedCreate {
			errs = append(errs, expr.Errorf("spec.entity.onUnmatched", "Create needs the managed entity table; remove entity.table or choose Record or Retry"))
		}
		for _, id := range []struct{ field, v string }{
			{"schema", t.Schema}, {"name", t.Name}, {"keyColumn", t.KeyColumn}, {"stateColumn", t.StateColumn},
		} {
			if err := identifier(id.v); err != nil {
				errs = append(errs, expr.Errorf("spec.entity.table."+id.field, "%v", err))
			}
		}
		if t.AmountColumn != "" {
			if err := identifier(t.AmountColumn); err != nil {
				errs = append(errs, expr.Errorf("spec.entity.table.amountColumn", "%v", err))
			}
		}
		if t.Tenant != nil {
			if err := identifier(t.Tenant.Column); err != nil {
				errs = append(errs, expr.Errorf("spec.entity.table.tenant.column", "%v", err))
			}
			if t.Tenant.Value == "" {
				errs = append(errs, expr.Errorf("spec.entity.table.tenant.value", "is required"))
			}
		}
	}
	return errors.Join(errs...)
}

// identifier accepts any PostgreSQL identifier; it is always quoted, so only emptiness,
// length and NUL bytes matter.
func identifier(s string) error {
	switch {
	case s == "":
		return errors.New("is required")
	case len(s) > v1alpha1.MaxIdentifierLength:
		return fmt.Errorf("%q is longer than %d bytes", s, v1alpha1.MaxIdentifierLength)
	case strings.ContainsRune(s, 0):
		return errors.New("contains a NUL byte")
	}
	return nil
}

func validateDelivery(spec *v1alpha1.WebhookEndpointSpec) error {
	var errs []error
	d := spec.Delivery
	const f = "spec.delivery"
	switch {
	case (d.Sink.URL == "") == (d.Sink.ServiceRef == nil):
		errs = append(errs, expr.Errorf(f+".sink", "needs exactly one of url or serviceRef"))
	case d.Sink.URL != "":
		if err := httpURL(d.Sink.URL); err != nil {
			errs = append(errs, expr.Errorf(f+".sink.url", "%v", err))
		} else if u, _ := url.Parse(d.Sink.URL); isMetadataHost(u.Hostname()) {
			errs = append(errs, expr.Errorf(f+".sink.url", "names a cloud instance-metadata address (%s), "+
				"which is never a sink: events would be posted to the node's credentials service", u.Hostname()))
		}
	case d.Sink.ServiceRef.Name == "":
		errs = append(errs, expr.Errorf(f+".sink.serviceRef.name", "is required"))
	case d.Sink.ServiceRef.Port < v1alpha1.MinPort || d.Sink.ServiceRef.Port > v1alpha1.MaxPort:
		errs = append(errs, expr.Errorf(f+".sink.serviceRef.port", "must be between %d and %d", v1alpha1.MinPort, v1alpha1.MaxPort))
	}
	if d.MaxAttempts < v1alpha1.MinMaxAttempts || d.MaxAttempts > v1alpha1.MaxMaxAttempts {
		errs = append(errs, expr.Errorf(f+".maxAttempts", "must be between %d and %d, got %d", v1alpha1.MinMaxAttempts, v1alpha1.MaxMaxAttempts, d.MaxAttempts))
	}
	if d.Backoff.Initial.Duration <= 0 {
		errs = append(errs, expr.Errorf(f+".backoff.initial", "must be positive"))
	}
	if d.Backoff.Max.Duration < d.Backoff.Initial.Duration {
		errs = append(errs, expr.Errorf(f+".backoff.max", "%s is less than backoff.initial %s", d.Backoff.Max.Duration, d.Backoff.Initial.Duration))
	}
	if d.Timeout.Duration <= 0 {
		errs = append(errs, expr.Errorf(f+".timeout", "must be positive"))
	}
	if d.Ordering != v1alpha1.OrderingPerEntity && d.Ordering != v1alpha1.OrderingNone {
		errs = append(errs, expr.Errorf(f+".ordering", "unknown ordering %q (PerEntity or None)", d.Ordering))
	}
	if d.Concurrency < v1alpha1.MinConcurrency || d.Concurrency > v1alpha1.MaxConcurrency {
		errs = append(errs, expr.Errorf(f+".concurrency", "must be between %d and %d, got %d", v1alpha1.MinConcurrency, v1alpha1.MaxConcurrency, d.Concurrency))
	}
	return errors.Join(errs...)
}

func validateReceiver(spec *v1alpha1.WebhookEndpointSpec) error {
	var errs []error
	r := spec.Receiver
	if !strings.HasPrefix(r.Path, "/") {
		errs = append(errs, expr.Errorf("spec.receiver.path", "%q must start with /", r.Path))
	}
	if r.MaxBodyBytes < v1alpha1.MinMaxBodyBytes || r.MaxBodyBytes > v1alpha1.MaxMaxBodyBytes {
		errs = append(errs, expr.Errorf("spec.receiver.maxBodyBytes", "must be between %d and %d, got %d", v1alpha1.MinMaxBodyBytes, v1alpha1.MaxMaxBodyBytes, r.MaxBodyBytes))
	}
	// Zero is the default (v1alpha1.DefaultMaxInFlight), for specs that skipped defaulting.
	if r.MaxInFlight < 0 || r.MaxInFlight > v1alpha1.MaxMaxInFlight {
		errs = append(errs, expr.Errorf("spec.receiver.maxInFlight", "must be between %d and %d, got %d", v1alpha1.MinMaxInFlight, v1alpha1.MaxMaxInFlight, r.MaxInFlight))
	}
	if r.Replicas != nil && *r.Replicas < 0 {
		errs = append(errs, expr.Errorf("spec.receiver.replicas", "must not be negative"))
	}
	return errors.Join(errs...)
}

func validateRetention(spec *v1alpha1.WebhookEndpointSpec) error {
	var errs []error
	r := spec.Retention
	for _, f := range []struct {
		field string
		d     *metav1.Duration
	}{{"payloadFor", r.PayloadFor}, {"dedupeFor", r.DedupeFor}, {"deliveredFor", r.DeliveredFor}} {
		if d := f.d; d != nil && d.Duration != 0 && (d.Duration < v1alpha1.MinRetention || d.Duration > v1alpha1.MaxRetention) {
			errs = append(errs, expr.Errorf("spec.retention."+f.field, "must be 0s (forever) or between %s and %s, got %s", v1alpha1.MinRetention, v1alpha1.MaxRetention, d.Duration))
		}
	}
	if p, d := r.PayloadFor, r.DedupeFor; p != nil && d != nil && d.Duration != 0 && (p.Duration == 0 || d.Duration < p.Duration) {
		errs = append(errs, expr.Errorf("spec.retention.dedupeFor", "must be 0s (forever) or at least retention.payloadFor (%s): a receipt's dedupe record must outlive its payload, got %s", p.Duration, d.Duration))
	}
	return errors.Join(errs...)
}

func httpURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return errors.New("is not a URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("scheme %q is not http or https", u.Scheme)
	}
	if u.Host == "" {
		return errors.New("has no host")
	}
	return nil
}
