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
	LabelEndpoint = "endpoint"
	LabelCode     = "code"
	LabelOutcome  = "outcome"
	LabelReason   = "reason"
	LabelResult   = "result"
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

	// Transitions counts recorded events by outcome (applied, ignored_state,
	// guard_failed, unmatched, unhandled).
	Transitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookkeeper_transitions_total",
		Help: "Recorded events by state-machine outcome.",
	}, []string{LabelEndpoint, LabelOutcome})

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

	// OutboxDead is the number of dead-lettered rows.
	OutboxDead = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "hookkeeper_outbox_dead_letters",
		Help: "Outbox rows dead-lettered after maxAttempts or a 410 from the sink.",
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
	reg.MustRegister(Requests, RequestDuration, Duplicates, SignatureFailures, Transitions, GroupSize,
		OutboxBacklog, OutboxOldestAge, OutboxDead, Deliveries, DeliveryAttempts, CommitToDelivery)
}
