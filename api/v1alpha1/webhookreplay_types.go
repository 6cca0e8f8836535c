package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ReplayAction is what a WebhookReplay does to the rows it selects.
// +kubebuilder:validation:Enum=Replay;Discard;Erase
type ReplayAction string

// The replay actions.
const (
	// ReplayActionReplay re-drives dead letters (deadLetters) or re-runs stored receipts
	// (receipts), as `hookkeeper replay` does.
	ReplayActionReplay ReplayAction = "Replay"
	// ReplayActionDiscard marks dead letters discarded, on the record, as `hookkeeper
	// discard` does.
	ReplayActionDiscard ReplayAction = "Discard"
	// ReplayActionErase removes the stored payloads of one entity (entityKey).
	ReplayActionErase ReplayAction = "Erase"
)

// ReplayOutcome is a receipt outcome a replay may re-run.
// +kubebuilder:validation:Enum=unmatched;guard_failed;guard_error;parked;expired;unhandled
type ReplayOutcome string

// EndpointReference names a WebhookEndpoint in the WebhookReplay's own namespace.
type EndpointReference struct {
	// name of the WebhookEndpoint, in the WebhookReplay's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// ReceiptSelection selects stored receipts by outcome.
type ReceiptSelection struct {
	// outcomes to re-run, of unmatched, guard_failed, guard_error, parked, expired and
	// unhandled (the events stored while a transition for their type was rolling out);
	// empty means unmatched, guard_failed and guard_error.
	// +kubebuilder:validation:MaxItems=6
	// +listType=set
	// +optional
	Outcomes []ReplayOutcome `json:"outcomes,omitempty"`
}

// WebhookReplaySpec says which endpoint, what to do and to which rows. It is immutable:
// a WebhookReplay runs once; to run again, create another.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: a WebhookReplay runs once; create a new WebhookReplay to run again"
// +kubebuilder:validation:XValidation:rule="self.action != 'Replay' || (has(self.deadLetters) && self.deadLetters) != has(self.receipts)",message="action Replay selects either deadLetters: true or receipts, exactly one"
// +kubebuilder:validation:XValidation:rule="self.action != 'Discard' || ((has(self.deadLetters) && self.deadLetters) && !has(self.receipts))",message="action Discard works on dead letters: set deadLetters: true (and no receipts)"
// +kubebuilder:validation:XValidation:rule="self.action != 'Erase' || (!(has(self.deadLetters) && self.deadLetters) && !has(self.receipts) && !has(self.ids) && !has(self.since) && !has(self.until))",message="action Erase selects by entityKey: deadLetters, receipts, ids, since and until do not apply"
// +kubebuilder:validation:XValidation:rule="(self.action == 'Erase') == has(self.entityKey)",message="entityKey is required with action Erase, and applies only to it"
// +kubebuilder:validation:XValidation:rule="self.action == 'Replay' || (has(self.reason) && self.reason.trim().size() > 0)",message="reason is required with actions Discard and Erase: it is recorded with who ran it"
// +kubebuilder:validation:XValidation:rule="!has(self.since) || !has(self.until) || timestamp(self.since) < timestamp(self.until)",message="since must be before until"
type WebhookReplaySpec struct {
	// endpointRef names the WebhookEndpoint whose database holds the rows, in this
	// namespace.
	EndpointRef EndpointReference `json:"endpointRef"`
	// action: Replay re-drives dead letters or re-runs receipts; Discard marks dead
	// letters discarded, with reason; Erase removes one entity's stored payloads
	// (entityKey), with reason.
	// +kubebuilder:default=Replay
	// +optional
	Action ReplayAction `json:"action,omitempty"`
	// deadLetters selects dead-lettered outbox rows (Replay, Discard), by the time they
	// were dead-lettered.
	// +optional
	DeadLetters bool `json:"deadLetters,omitempty"`
	// receipts selects stored receipts by outcome (Replay only), by the time they were
	// received.
	// +optional
	Receipts *ReceiptSelection `json:"receipts,omitempty"`
	// since selects rows dead-lettered (or received) at or after this time.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// until selects rows dead-lettered (or received) before this time. The operator
	// also bounds every run by the time it started, so rows that die (or arrive) while
	// it runs are not part of it.
	// +optional
	Until *metav1.Time `json:"until,omitempty"`
	// ids limits the run to these row ids: outbox ids with deadLetters, receipt ids with
	// receipts.
	// +kubebuilder:validation:MaxItems=1000
	// +listType=set
	// +optional
	IDs []int64 `json:"ids,omitempty"`
	// entityKey is the entity whose stored payloads Erase removes; required with Erase.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	EntityKey string `json:"entityKey,omitempty"`
	// reason is recorded with the run; required with Discard and Erase.
	// +kubebuilder:validation:MaxLength=1000
	// +optional
	Reason string `json:"reason,omitempty"`
	// dryRun counts what would change and changes nothing.
	// +optional
	DryRun bool `json:"dryRun,omitempty"`
}

// Condition types of a WebhookReplay, besides Ready, Reconciling and Stalled (kstatus,
// as a WebhookEndpoint's).
const (
	// ConditionSucceeded is True once the run finished, False when it cannot run (the
	// reason says why), Unknown while it runs or waits.
	ConditionSucceeded = "Succeeded"
)

// WebhookReplayStatus is what the run did.
type WebhookReplayStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// actor is who the run is recorded as, in the endpoint's database and on discards.
	// +optional
	Actor string `json:"actor,omitempty"`
	// startedAt is when the run claimed its record in the endpoint's database.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// completedAt is when the run finished.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`
	// selected rows matched the selection when the run started.
	// +optional
	Selected int64 `json:"selected,omitempty"`
	// changed rows were re-driven, re-run, discarded or erased (zero in a dry run).
	// +optional
	Changed int64 `json:"changed,omitempty"`
	// outcomes counts the re-run receipts' outcomes afterwards (receipts); for Erase,
	// erasedReceipts, erasedDeliveries, keptParked, keptUndelivered and erasure (the id
	// of its record in the endpoint's erasures table).
	// +optional
	Outcomes map[string]int64 `json:"outcomes,omitempty"`
	// message says what happened, or what the run waits for.
	// +optional
	Message string `json:"message,omitempty"`
	// conditions: Succeeded, Ready, and the kstatus Reconciling and Stalled.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// WebhookReplay runs one replay, discard or erase on a WebhookEndpoint's database, once,
// and records who asked for it and what it changed.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=whr
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.spec.endpointRef.name`
// +kubebuilder:printcolumn:name="Action",type=string,JSONPath=`.spec.action`
// +kubebuilder:printcolumn:name="Selected",type=integer,JSONPath=`.status.selected`
// +kubebuilder:printcolumn:name="Changed",type=integer,JSONPath=`.status.changed`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type WebhookReplay struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   WebhookReplaySpec   `json:"spec,omitempty"`
	Status WebhookReplayStatus `json:"status,omitempty"`
}

// WebhookReplayList is a list of WebhookReplays.
// +kubebuilder:object:root=true
type WebhookReplayList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WebhookReplay `json:"items"`
}
