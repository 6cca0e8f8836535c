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
	Requests = endpointCounter("hookkeeper_webhook_requests_total",
		"Webhook requests by HTTP status code and outcome.", LabelCode, LabelOutcome)

	// RequestDuration is the time from first byte to response.
	RequestDuration = endpointHistogram("hookkeeper_webhook_request_duration_seconds",
		"Webhook request latency, body read to response written.",
		[]float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5})

	// Duplicates counts authentic deliveries of an already recorded event.
	Duplicates = endpointCounter("hookkeeper_webhook_duplicates_total",
		"Authentic deliveries of an event that was already recorded (acknowledged, no effects).")

	// SignatureFailures counts rejected signatures by reason (signature.Reason).
	SignatureFailures = endpointCounter("hookkeeper_webhook_signature_failures_total",
		"Requests rejected before anything was stored, by signature failure reason.", LabelReason)

	// Transitions counts decisions by outcome (applied, parked, ignored_state,
	// guard_failed, guard_error, unmatched, unhandled): one per recorded event, and one
	// more each time a parked event is released (applied or closed).
	Transitions = endpointCounter("hookkeeper_transitions_total",
		"Recorded events by state-machine outcome.", LabelOutcome)

	// GuardErrors counts guards that failed to evaluate, by transition: the event was
	// recorded as guard_error and nothing applied.
	GuardErrors = endpointCounter("hookkeeper_guard_errors_total",
		"Events recorded as guard_error (a guard failed to evaluate), by transition.", LabelTransition)

	// ParkedEvents is how many events wait for their entity (outcome parked).
	ParkedEvents = endpointGauge("hookkeeper_parked_events",
		"Events parked until their entity reaches a state they apply from.")

	// ParkedOldestAge is the age of the oldest parked event.
	ParkedOldestAge = endpointGauge("hookkeeper_parked_oldest_age_seconds",
		"Age of the oldest parked event, 0 when none.")

	// ParkedExpired counts parked events that waited longer than stateMachine.parkFor.
	ParkedExpired = endpointCounter("hookkeeper_parked_expired_total",
		"Parked events recorded as expired after stateMachine.parkFor.")

	// RetentionRemoved counts rows retention pruned, by kind: payloads (a receipt's
	// payload and headers), receipts (dedupe records), deliveries (delivered outbox rows).
	RetentionRemoved = endpointCounter("hookkeeper_retention_removed_total",
		"Rows removed by spec.retention, by kind (payloads, receipts, deliveries).", "kind")

	// InFlight is the webhook requests a receiver is handling now (spec.receiver.maxInFlight
	// caps it).
	InFlight = endpointGauge("hookkeeper_webhook_in_flight_requests",
		"Webhook requests being handled by this receiver now.")

	// Overloaded counts requests refused with 503 because maxInFlight requests were
	// already being handled.
	Overloaded = endpointCounter("hookkeeper_webhook_overloaded_total",
		"Webhook requests refused with 503 and Retry-After because spec.receiver.maxInFlight requests were in flight.")

	// PoolOverloaded counts requests a receiver pool pod refused with 503 because its
	// spec.maxInFlight requests (all endpoints together) were already being handled.
	PoolOverloaded = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hookkeeper_receiver_pool_overloaded_total",
		Help: "Webhook requests a receiver pool pod refused with 503 and Retry-After because the pool's spec.maxInFlight requests were in flight.",
	})

	// RejectionLogsSuppressed counts rejection log lines left out by the rate limit
	// (the requests themselves are counted in full by the other metrics).
	RejectionLogsSuppressed = endpointCounter("hookkeeper_webhook_rejection_logs_suppressed_total",
		"Rejection log lines left out by the per-reason rate limit.", LabelReason)

	// GroupSize is how many deliveries shared each receipt transaction (group commit).
	GroupSize = endpointHistogram("hookkeeper_receipt_group_size",
		"Deliveries committed per receipt transaction (group commit; 1 = alone).",
		[]float64{1, 2, 4, 8, 16, 32, 64})

	// Predictions counts group members decided on a prediction of their entity, by
	// result: held (one round trip), duplicate (one round trip), missed (decided again,
	// unpredicted: a second transaction).
	Predictions = endpointCounter("hookkeeper_receipt_predictions_total",
		"Deliveries decided on a prediction of their entity, by result: held, duplicate or missed (run again unpredicted).", LabelResult)
)

// Dispatcher metrics.
var (
	// OutboxBacklog is the number of undelivered, not dead outbox rows.
	OutboxBacklog = endpointGauge("hookkeeper_outbox_backlog",
		"Outbox rows not yet delivered and not dead.")

	// OutboxOldestAge is the age of the oldest undelivered row: the best lag signal.
	OutboxOldestAge = endpointGauge("hookkeeper_outbox_oldest_undelivered_age_seconds",
		"Age of the oldest undelivered, not dead outbox row (0 when none).")

	// OutboxDead is the number of dead-lettered rows not discarded.
	OutboxDead = endpointGauge("hookkeeper_outbox_dead_letters",
		"Outbox rows dead-lettered after maxAttempts or a 410 from the sink, and not discarded.")

	// SinkDown is 1 while the endpoint's dispatchers hold deliveries because the sink is
	// down (consecutive unavailable answers), 0 otherwise. Every replica reports the
	// state they share.
	SinkDown = endpointGauge("hookkeeper_outbox_sink_down",
		"1 while the dispatchers hold deliveries and probe because the sink is down, else 0.")

	// Deliveries counts delivery attempts by result (delivered, retry, dead).
	Deliveries = endpointCounter("hookkeeper_outbox_deliveries_total",
		"Delivery attempts by result: delivered, retry or dead.", LabelResult)

	// DeliveryAttempts is the attempt number at which rows were delivered or died.
	DeliveryAttempts = endpointHistogram("hookkeeper_outbox_delivery_attempts",
		"Attempts a row needed before it was delivered or dead-lettered.",
		[]float64{1, 2, 3, 4, 6, 8, 12, 20, 50, 100})

	// CommitToDelivery is the time from the outbox row's commit to the sink's 2xx.
	CommitToDelivery = endpointHistogram("hookkeeper_outbox_commit_to_delivery_seconds",
		"Time from outbox commit to a 2xx from the sink.",
		[]float64{.005, .01, .025, .05, .1, .2, .5, 1, 5, 30, 300})
)

// endpointCounter is a counter labelled by endpoint, then by labels.
func endpointCounter(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, append([]string{LabelEndpoint}, labels...))
}

// endpointGauge is a gauge labelled by endpoint.
func endpointGauge(name, help string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{LabelEndpoint})
}

// endpointHistogram is a histogram labelled by endpoint.
func endpointHistogram(name, help string, buckets []float64) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, []string{LabelEndpoint})
}

// endpointMetric is a metric labelled by endpoint.
type endpointMetric interface {
	prometheus.Collector
	DeletePartialMatch(prometheus.Labels) int
}

// endpointMetrics is every metric labelled by endpoint: the one list Register adds and
// Forget removes an endpoint's series from, so that no metric is exported and then
// never forgotten.
func endpointMetrics() []endpointMetric {
	return []endpointMetric{
		Requests, RequestDuration, Duplicates, SignatureFailures, Transitions, GuardErrors,
		ParkedEvents, ParkedOldestAge, ParkedExpired, RetentionRemoved, InFlight, Overloaded,
		RejectionLogsSuppressed, GroupSize, Predictions, OutboxBacklog, OutboxOldestAge, OutboxDead, SinkDown,
		Deliveries, DeliveryAttempts, CommitToDelivery,
	}
}

// Register adds every metric to reg. Call it once per registry.
func Register(reg prometheus.Registerer) {
	reg.MustRegister(PoolOverloaded)
	for _, m := range endpointMetrics() {
		reg.MustRegister(m)
	}
}

// Forget removes every series of endpoint, so a receiver pool that stops serving an
// endpoint stops exporting it.
func Forget(endpoint string) {
	match := prometheus.Labels{LabelEndpoint: endpoint}
	for _, m := range endpointMetrics() {
		m.DeletePartialMatch(match)
	}
}
