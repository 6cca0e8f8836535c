package v1alpha1

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Defaults of the spec. The CRD's +kubebuilder:default markers cannot name a Go
// constant, so they repeat these values; TestDefaultsMatchTheAPIServer (an envtest round
// trip) fails when the two disagree. Everything else (config, the dispatcher, the
// signature verifier, the resource builders) reads the constants from here.
const (
	DefaultTolerance         = 5 * time.Minute
	DefaultHMACAlgorithm     = HMACSHA256
	DefaultHMACEncoding      = EncodingHex
	DefaultHMACKeyEncoding   = KeyRaw
	DefaultSignedContent     = "{body}"
	DefaultTimestampFormat   = TimestampUnix
	DefaultPublicKeyEncoding = PublicKeyHex
	DefaultPairSeparator     = ","
	DefaultKeyValueSeparator = "="
	DefaultRefetchTimeout    = 5 * time.Second
	DefaultParkFor           = 72 * time.Hour
	DefaultSchema            = "hookkeeper"
	DefaultMaxConnections    = 10
	DefaultTableSchema       = "public"
	DefaultOnUnmatched       = UnmatchedRecord
	DefaultServicePort       = 80
	DefaultServicePath       = "/"
	DefaultMaxAttempts       = 12
	DefaultBackoffInitial    = time.Second
	DefaultBackoffMax        = 15 * time.Minute
	DefaultTimeout           = 10 * time.Second
	DefaultOrdering          = OrderingPerEntity
	DefaultConcurrency       = 16
	DefaultReplicas          = 2
	// DefaultMinReplicas and DefaultTargetCPUUtilization are autoscaling's defaults.
	DefaultMinReplicas          = 2
	DefaultTargetCPUUtilization = 70
	DefaultReceiverPath         = "/"
	DefaultMaxBodyBytes         = 1 << 20
	DefaultMaxInFlight          = 64
	DefaultDatabasePort         = 5432
	DefaultPayloadFor           = 720 * time.Hour
	DefaultDedupeFor            = 9600 * time.Hour
	DefaultDeliveredFor         = 168 * time.Hour
	// DefaultEnabled is the default of monitoring.*.enabled and networkPolicy.enabled.
	DefaultEnabled = true
	// DefaultReplayAction is a WebhookReplay's spec.action.
	DefaultReplayAction = ReplayActionReplay
)

// Limits of the spec that Go validation checks again (config.Validate, for manifests
// that never went through an API server). The CRD's validation markers repeat them;
// TestLimitsMatchTheCRD reads the generated CRD and fails when the two disagree.
const (
	MinSigningSecrets = 1
	MaxSigningSecrets = 4
	MaxParkFor        = 8760 * time.Hour
	// MinRetention and MaxRetention bound each spec.retention duration other than 0s
	// (which keeps that data forever).
	MinRetention = time.Hour
	MaxRetention = 87600 * time.Hour
	// SchemaPattern is spec.database.schema's pattern: a PostgreSQL identifier that
	// needs no quoting.
	SchemaPattern = `^[a-z_][a-z0-9_]{0,62}$`
	// MaxIdentifierLength is PostgreSQL's identifier length (NAMEDATALEN-1): the limit
	// of spec.entity.table's schema, name and columns.
	MaxIdentifierLength = 63
	MinMaxConnections   = 2
	MaxMaxConnections   = 200
	MinPort             = 1
	MaxPort             = 65535
	MinMaxAttempts      = 1
	MaxMaxAttempts      = 100
	MinConcurrency      = 1
	MaxConcurrency      = 256
	MinMaxBodyBytes     = 1024
	MaxMaxBodyBytes     = 32 << 20
	MinMaxInFlight      = 1
	MaxMaxInFlight      = 4096
	// MaxMonitoringLabels bounds spec.monitoring.labels, and the operator-wide
	// --monitoring-labels alike.
	MaxMonitoringLabels = 16

	// Limits of a WebhookReplay's spec. MaxReplayReason is the discard record's limit
	// (outbox.MaxDiscardReason, which TestReplayLimitsMatchTheCRD also checks).
	MaxReplayReason    = 1000
	MaxReplayIDs       = 1000
	MaxReplayEntityKey = 1024
	MaxEndpointRefName = 253
)

// Default fills every empty field that has a CRD default, as the API server does for
// objects it stores, for manifests read from a file or the environment, which never
// went through an API server. It has the shape of a kubebuilder defaulting webhook, but
// the operator installs no webhook: the CRD's markers default stored objects.
func (s *WebhookEndpointSpec) Default() {
	p := &s.Provider
	durationDefault(&p.Tolerance, DefaultTolerance)
	if h := p.HMAC; h != nil {
		h.Default()
		valueDefault(&h.Algorithm, DefaultHMACAlgorithm)
		valueDefault(&h.KeyEncoding, DefaultHMACKeyEncoding)
	}
	if e := p.Ed25519; e != nil {
		e.Default()
		valueDefault(&e.KeyEncoding, DefaultPublicKeyEncoding)
	}
	if r := p.Refetch; r != nil {
		durationDefault(&r.Timeout, DefaultRefetchTimeout)
	}

	durationDefault(&s.StateMachine.ParkFor, DefaultParkFor)

	valueDefault(&s.Database.Schema, DefaultSchema)
	valueDefault(&s.Database.MaxConnections, DefaultMaxConnections)
	if t := s.Entity.Table; t != nil {
		valueDefault(&t.Schema, DefaultTableSchema)
	}
	valueDefault(&s.Entity.OnUnmatched, DefaultOnUnmatched)

	d := &s.Delivery
	if ref := d.Sink.ServiceRef; ref != nil {
		valueDefault(&ref.Port, DefaultServicePort)
		valueDefault(&ref.Path, DefaultServicePath)
	}
	valueDefault(&d.MaxAttempts, DefaultMaxAttempts)
	durationDefault(&d.Backoff.Initial, DefaultBackoffInitial)
	durationDefault(&d.Backoff.Max, DefaultBackoffMax)
	durationDefault(&d.Timeout, DefaultTimeout)
	valueDefault(&d.Ordering, DefaultOrdering)
	valueDefault(&d.Concurrency, DefaultConcurrency)

	r := &s.Receiver
	pointerDefault(&r.Replicas, DefaultReplicas)
	if a := r.Autoscaling; a != nil {
		a.Default()
	}
	valueDefault(&r.Path, DefaultReceiverPath)
	valueDefault(&r.MaxBodyBytes, DefaultMaxBodyBytes)
	valueDefault(&r.MaxInFlight, DefaultMaxInFlight)

	pointerDefault(&s.Monitoring.ServiceMonitor.Enabled, DefaultEnabled)
	pointerDefault(&s.Monitoring.PrometheusRule.Enabled, DefaultEnabled)
	s.NetworkPolicy.Default()

	durationDefault(&s.Retention.PayloadFor, DefaultPayloadFor)
	durationDefault(&s.Retention.DedupeFor, DefaultDedupeFor)
	durationDefault(&s.Retention.DeliveredFor, DefaultDeliveredFor)
}

// Default fills the empty fields of a WebhookReplay's spec that have CRD defaults.
func (s *WebhookReplaySpec) Default() {
	valueDefault(&s.Action, DefaultReplayAction)
}

// Default fills the empty fields of a pool that have CRD defaults.
func (s *WebhookReceiverPoolSpec) Default() {
	pointerDefault(&s.Replicas, DefaultReplicas)
	if a := s.Autoscaling; a != nil {
		a.Default()
	}
	valueDefault(&s.MaxInFlight, DefaultMaxInFlight)
	s.NetworkPolicy.Default()
}

// Default fills the empty fields of a NetworkPolicySpec that have CRD defaults.
func (n *NetworkPolicySpec) Default() {
	pointerDefault(&n.Enabled, DefaultEnabled)
	if eg := n.Egress; eg != nil {
		valueDefault(&eg.DatabasePort, DefaultDatabasePort)
	}
}

// Default fills the empty fields of an autoscaling spec that have CRD defaults.
func (a *AutoscalingSpec) Default() {
	pointerDefault(&a.MinReplicas, DefaultMinReplicas)
	pointerDefault(&a.TargetCPUUtilizationPercentage, DefaultTargetCPUUtilization)
}

// Default fills the empty fields of a generic scheme that have CRD defaults.
func (s *SchemeSpec) Default() {
	valueDefault(&s.Encoding, DefaultHMACEncoding)
	valueDefault(&s.SignedContent, DefaultSignedContent)
	valueDefault(&s.TimestampFormat, DefaultTimestampFormat)
	if c := s.Composite; c != nil {
		valueDefault(&c.PairSeparator, DefaultPairSeparator)
		valueDefault(&c.KeyValueSeparator, DefaultKeyValueSeparator)
	}
}

// URL is the in-cluster URL of the referenced Service, in namespace when the reference
// names none; an unset port or path takes its default.
func (r *ServiceReference) URL(namespace string) string {
	ns := r.Namespace
	if ns == "" {
		ns = namespace
	}
	port := r.Port
	if port == 0 {
		port = DefaultServicePort
	}
	path := r.Path
	if path == "" {
		path = DefaultServicePath
	}
	return fmt.Sprintf("http://%s.%s.svc:%d%s", r.Name, ns, port, path)
}

func valueDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

func pointerDefault[T any](v **T, def T) {
	if *v == nil {
		*v = &def
	}
}

func durationDefault(d **metav1.Duration, def time.Duration) {
	if *d == nil {
		*d = &metav1.Duration{Duration: def}
	}
}
