// Package metrics defines every Prometheus metric the receiver and dispatcher export, in
// one place so names and labels stay consistent with the alert rules and dashboard in
// charts/ and config/prometheus. Labels are low-cardinality by construction: an endpoint
// key, a status code class, an outcome or a reason, never an event id or a secret.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Label names.
const (
	LabelEndpoint   = "endpoint"
	LabelCode       = "code"
	LabelOutcome    = "outcome"
	LabelReason     = "reason"
	LabelResult     = "result"
	LabelTransition = "transition"
)

// Receiver metrics.
var (
	// Requests counts webhook requests by HTTP status code and outcome (applied,
	// ignored_state, guard_failed, unmatched, unhandled, duplicate, rejected, error).
	Requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookkeeper_webhook_requests_total",
		Help: "Webhook requests by HTTP status code and outcome.",
	}, []string{LabelEndpoint, LabelCode, LabelOutcome})

	// RequestDuration is the time from first byte to response.
	RequestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "hookkeeper_webhook_request_duration_seconds",
		Help:    "Webhook request latency, body read to response written.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	}, []string{LabelEndpoint})

	// Duplicates counts authentic deliveries of an already recorded event.
	Duplicates = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookkeeper_webhook_duplicates_total",
		Help: "Authentic deliveries of an event that was already recorded (acknowledged, no effects).",
	}, []string{LabelEndpoint})

	// SignatureFailures counts rejected signatures by reason (signature.Reason).
	SignatureFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookkeeper_webhook_signature_failures_total",
		Help: "Requests rejected before anything was stored, by signature failure reason.",
	}, []string{LabelEndpoint, LabelReason})

	// Transitions counts decisions by outcome (applied, parked, ignored_state,
	// guard_failed, guard_error, unmatched, unhandled): one per recorded event, and one
	// more each time a parked event is released (applied or closed).
	Transitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookkeeper_transitions_total",
		Help: "Recorded events by state-machine outcome.",
	}, []string{LabelEndpoint, LabelOutcome})

	// GuardErrors counts guards that failed to evaluate, by transition: the event was
	// recorded as guard_error and nothing applied.
	GuardErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookkeeper_guard_errors_total",
		Help: "Events recorded as guard_error (a guard failed to evaluate), by transition.",
	}, []string{LabelEndpoint, LabelTransition})

	// ParkedEvents is how many events wait for their entity (outcome parked).
	ParkedEvents = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "hookkeeper_parked_events",
		Help: "Events parked until their entity reaches a state they apply from.",
	}, []string{LabelEndpoint})

	// ParkedOldestAge is the age of the oldest parked event.
	ParkedOldestAge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "hookkeeper_parked_oldest_age_seconds",
		Help: "Age of the oldest parked event, 0 when none.",
	}, []string{LabelEndpoint})

	// ParkedExpired counts parked events that waited longer than stateMachine.parkFor.
	ParkedExpired = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookkeeper_parked_expired_total",
		Help: "Parked events recorded as expired after stateMachine.parkFor.",
	}, []string{LabelEndpoint})

	// RetentionRemoved counts rows retention pruned, by kind: payloads (a receipt's
	// payload and headers), receipts (dedupe records), deliveries (delivered outbox rows).
	RetentionRemoved = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookkeeper_retention_removed_total",
		Help: "Rows removed by spec.retention, by kind (payloads, receipts, deliveries).",
	}, []string{LabelEndpoint, "kind"})

	// InFlight is the webhook requests a receiver is handling now (spec.receiver.maxInFlight
	// caps it).
	InFlight = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "hookkeeper_webhook_in_flight_requests",
		Help: "Webhook requests being handled by this receiver now.",
	}, []string{LabelEndpoint})

	// Overloaded counts requests refused with 503 because maxInFlight requests were
	// already being handled.
	Overloaded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookkeeper_webhook_overloaded_total",
		Help: "Webhook requests refused with 503 and Retry-After because spec.receiver.maxInFlight requests were in flight.",
	}, []string{LabelEndpoint})

	// PoolOverloaded counts requests a receiver pool pod refused with 503 because its
	// spec.maxInFlight requests (all endpoints together) were already being handled.
	PoolOverloaded = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hookkeeper_receiver_pool_overloaded_total",
		Help: "Webhook requests a receiver pool pod refused with 503 and Retry-After because the pool's spec.maxInFlight requests were in flight.",
	})

	// RejectionLogsSuppressed counts rejection log lines left out by the rate limit
	// (the requests themselves are counted in full by the other metrics).
	RejectionLogsSuppressed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookkeeper_webhook_rejection_logs_suppressed_total",
		Help: "Rejection log lines left out by the per-reason rate limit.",
	}, []string{LabelEndpoint, LabelReason})

	// GroupSize is how many deliveries shared each receipt transaction (group commit).
	GroupSize = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "hookkeeper_receipt_group_size",
		Help:    "Deliveries committed per receipt transaction (group commit; 1 = alone).",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64},
	}, []string{LabelEndpoint})
)

// Dispatcher metrics.
var (
	// OutboxBacklog is the number of undelivered, not dead outbox rows.
	OutboxBacklog = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "hookkeeper_outbox_backlog",
		Help: "Outbox rows not yet delivered and not dead.",
	}, []string{LabelEndpoint})

	// OutboxOldestAge is the age of the oldest undelivered row: the best lag signal.
	OutboxOldestAge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "hookkeeper_outbox_oldest_undelivered_age_seconds",
		Help: "Age of the oldest undelivered, not dead outbox row (0 when none).",
	}, []string{LabelEndpoint})

	// OutboxDead is the number of dead-lettered rows not discarded.
	OutboxDead = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "hookkeeper_outbox_dead_letters",
		Help: "Outbox rows dead-lettered after maxAttempts or a 410 from the sink, and not discarded.",
	}, []string{LabelEndpoint})

	// SinkDown is 1 while the endpoint's dispatchers hold deliveries because the sink is
	// down (consecutive unavailable answers), 0 otherwise. Every replica reports the
	// state they share.
	SinkDown = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "hookkeeper_outbox_sink_down",
		Help: "1 while the dispatchers hold deliveries and probe because the sink is down, else 0.",
	}, []string{LabelEndpoint})

	// Deliveries counts delivery attempts by result (delivered, retry, dead).
	Deliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookkeeper_outbox_deliveries_total",
		Help: "Delivery attempts by result: delivered, retry or dead.",
	}, []string{LabelEndpoint, LabelResult})

	// DeliveryAttempts is the attempt number at which rows were delivered or died.
	DeliveryAttempts = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "hookkeeper_outbox_delivery_attempts",
		Help:    "Attempts a row needed before it was delivered or dead-lettered.",
		Buckets: []float64{1, 2, 3, 4, 6, 8, 12, 20, 50, 100},
	}, []string{LabelEndpoint})

	// CommitToDelivery is the time from the outbox row's commit to the sink's 2xx.
	CommitToDelivery = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "hookkeeper_outbox_commit_to_delivery_seconds",
		Help:    "Time from outbox commit to a 2xx from the sink.",
		Buckets: []float64{.005, .01, .025, .05, .1, .2, .5, 1, 5, 30, 300},
	}, []string{LabelEndpoint})
)

// Register adds every metric to reg. Call it once per registry.
func Register(reg prometheus.Registerer) {
	reg.MustRegister(GuardErrors, ParkedEvents, ParkedOldestAge, ParkedExpired, RetentionRemoved)
	reg.MustRegister(Requests, RequestDuration, Duplicates, SignatureFailures, Transitions, GroupSize,
		InFlight, Overloaded, PoolOverloaded, RejectionLogsSuppressed,
		OutboxBacklog, OutboxOldestAge, OutboxDead, SinkDown, Deliveries, DeliveryAttempts, CommitToDelivery)
}

// Forget removes every series of endpoint, so a receiver pool that stops serving an
// endpoint stops exporting it.
func Forget(endpoint string) {
	match := prometheus.Labels{LabelEndpoint: endpoint}
	for _, v := range []interface {
		DeletePartialMatch(prometheus.Labels) int
	}{
		Requests.MetricVec, RequestDuration.MetricVec, Duplicates.MetricVec, SignatureFailures.MetricVec,
		Transitions.MetricVec, GuardErrors.MetricVec, ParkedEvents.MetricVec, ParkedOldestAge.MetricVec,
		ParkedExpired.MetricVec, RetentionRemoved.MetricVec, InFlight.MetricVec, Overloaded.MetricVec,
		RejectionLogsSuppressed.MetricVec, GroupSize.MetricVec, OutboxBacklog.MetricVec, OutboxOldestAge.MetricVec,
		OutboxDead.MetricVec, SinkDown.MetricVec, Deliveries.MetricVec, DeliveryAttempts.MetricVec,
		CommitToDelivery.MetricVec,
	} {
		v.DeletePartialMatch(match)
	}
}
