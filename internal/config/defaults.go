package config

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// Defaults of the spec, the same values as the CRD's +kubebuilder:default markers. The
// API server applies those to objects it stores; ApplyDefaults applies them to manifests
// read from a file or the environment, which never went through an API server.
const (
	DefaultTolerance      = 5 * time.Minute
	DefaultRefetchTimeout = 5 * time.Second
	DefaultSchema         = "hookkeeper"
	DefaultMaxConnections = 10
	DefaultTableSchema    = "public"
	DefaultServicePort    = 80
	DefaultPath           = "/"
	DefaultMaxAttempts    = 12
	DefaultBackoffInitial = time.Second
	DefaultBackoffMax     = 15 * time.Minute
	DefaultTimeout        = 10 * time.Second
	DefaultConcurrency    = 16
	DefaultReplicas       = 2
	DefaultMaxBodyBytes   = 1 << 20
	DefaultMaxInFlight    = 64
	DefaultDatabasePort   = 5432
	DefaultSignedContent  = "{body}"
	DefaultParkFor        = 72 * time.Hour
)

// ApplyDefaults fills every empty field that has a CRD default. Booleans whose CRD
// default is true (monitoring toggles, networkPolicy.enabled) are left alone: Go cannot
// tell false from absent, and only the operator, which reads API-server-defaulted
// objects, uses them.
func ApplyDefaults(spec *v1alpha1.WebhookEndpointSpec) {
	p := &spec.Provider
	durationDefault(&p.Tolerance, DefaultTolerance)
	if h := p.HMAC; h != nil {
		stringDefault((*string)(&h.Algorithm), string(v1alpha1.HMACSHA256))
		stringDefault((*string)(&h.Encoding), string(v1alpha1.EncodingHex))
		stringDefault((*string)(&h.KeyEncoding), string(v1alpha1.KeyRaw))
		stringDefault(&h.SignedContent, DefaultSignedContent)
	}
	if r := p.Refetch; r != nil {
		durationDefault(&r.Timeout, DefaultRefetchTimeout)
	}

	durationDefault(&spec.StateMachine.ParkFor, DefaultParkFor)

	stringDefault(&spec.Database.Schema, DefaultSchema)
	if spec.Database.MaxConnections == 0 {
		spec.Database.MaxConnections = DefaultMaxConnections
	}
	if t := spec.Entity.Table; t != nil {
		stringDefault(&t.Schema, DefaultTableSchema)
	}
	stringDefault((*string)(&spec.Entity.OnUnmatched), string(v1alpha1.UnmatchedRecord))

	d := &spec.Delivery
	if s := d.Sink.ServiceRef; s != nil {
		if s.Port == 0 {
			s.Port = DefaultServicePort
		}
		stringDefault(&s.Path, DefaultPath)
	}
	if d.MaxAttempts == 0 {
		d.MaxAttempts = DefaultMaxAttempts
	}
	durationDefault(&d.Backoff.Initial, DefaultBackoffInitial)
	durationDefault(&d.Backoff.Max, DefaultBackoffMax)
	durationDefault(&d.Timeout, DefaultTimeout)
	stringDefault((*string)(&d.Ordering), string(v1alpha1.OrderingPerEntity))
	if d.Concurrency == 0 {
		d.Concurrency = DefaultConcurrency
	}

	r := &spec.Receiver
	if r.Replicas == nil {
		n := int32(DefaultReplicas)
		r.Replicas = &n
	}
	stringDefault(&r.Path, DefaultPath)
	if r.MaxBodyBytes == 0 {
		r.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if r.MaxInFlight == 0 {
		r.MaxInFlight = DefaultMaxInFlight
	}
	if np := spec.NetworkPolicy.Egress; np != nil && np.DatabasePort == 0 {
		np.DatabasePort = DefaultDatabasePort
	}
}

func stringDefault(s *string, def string) {
	if *s == "" {
		*s = def
	}
}

func durationDefault(d **metav1.Duration, def time.Duration) {
	if *d == nil {
		*d = &metav1.Duration{Duration: def}
	}
}
