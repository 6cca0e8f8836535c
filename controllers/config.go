package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/resources"
)

// Event reasons.
const (
	EventConfigInvalid      = "ConfigInvalid"
	EventConfigValid        = "ConfigValid"
	EventSecretMissing      = "SecretMissing"
	EventSecretsResolved    = "SecretsResolved"
	EventSecretRotated      = "SecretRotated"
	EventSecretExpired      = "SigningSecretExpired"
	EventConfigChanged      = "ConfigChanged"
	EventMigrationStarted   = "MigrationStarted"
	EventMigrationSucceeded = "MigrationSucceeded"
	EventMigrationFailed    = "MigrationFailed"
	// EventMigrationAttemptFailed: one attempt of the migration Job failed; it retries.
	EventMigrationAttemptFailed = "MigrationAttemptFailed"
	EventReceiverAvailable      = "ReceiverAvailable"
	EventReceiverUnavailable    = "ReceiverUnavailable"
	EventExposed                = "Exposed"
	EventExposureRemoved        = "ExposureRemoved"
	// EventSinkDown: the dispatchers hold deliveries because the sink stopped answering.
	EventSinkDown = "SinkDown"
	// EventSinkRecovered: the sink answers again and delivery resumed.
	EventSinkRecovered = "SinkRecovered"
)

// event records an Event on the endpoint. Notes never carry secret values: callers pass
// names, keys and reasons only.
func (r *WebhookEndpointReconciler) event(ep *v1alpha1.WebhookEndpoint, eventType, reason, action, note string, args ...any) {
	recordEvent(r.Recorder, ep, eventType, reason, action, note, args...)
}

// recordEvent records an event on obj, its note cut to maxEventNote; nothing without a
// recorder.
func recordEvent(rec events.EventRecorder, obj runtime.Object, eventType, reason, action, note string, args ...any) {
	if rec == nil {
		return
	}
	msg := fmt.Sprintf(note, args...)
	if len(msg) > maxEventNote {
		msg = msg[:maxEventNote-3] + "..."
	}
	rec.Eventf(obj, nil, eventType, reason, action, "%s", msg)
}

// maxEventNote keeps notes under the events.k8s.io limit (1 kB); a longer note would
// make the API server reject the Event.
const maxEventNote = 1000

// imageAllowed reports whether a spec's image override may run: unset, the operator's
// own receiver image, or one of AllowedImages.
func (o Options) imageAllowed(image string) bool {
	if image == "" || image == o.ReceiverImage {
		return true
	}
	for _, a := range o.AllowedImages {
		if prefix, ok := strings.CutSuffix(a, "*"); ok && strings.HasPrefix(image, prefix) || a == image {
			return true
		}
	}
	return false
}

// imageNotAllowed is the message for an image override the operator does not allow.
func imageNotAllowed(field, image string) string {
	return fmt.Sprintf("%s %q is not an image this operator runs: receiver and migration pods get the Secrets "+
		"the endpoint names, so only the operator's own image and those its administrator allowed "+
		"(--allowed-receiver-images) may run them; remove the field to use the operator's image", field, image)
}

// reconcileConfig checks what admission cannot (CEL compiles, templates parse) and
// renders the receiver's view of the endpoint.
func (r *WebhookEndpointReconciler) reconcileConfig(_ context.Context, st *state) error {
	err := r.validate(st.ep)
	if err == nil && !r.Options.imageAllowed(st.ep.Spec.Receiver.Image) {
		err = errors.New(imageNotAllowed("spec.receiver.image", st.ep.Spec.Receiver.Image))
	}
	if err != nil {
		msg := err.Error()
		if st.transitioned(v1alpha1.ConditionConfigValid, metav1.ConditionFalse, ReasonInvalidConfig) {
			r.event(st.ep, corev1.EventTypeWarning, EventConfigInvalid, "Validate", "%s", msg)
		}
		st.setCondition(v1alpha1.ConditionConfigValid, metav1.ConditionFalse, ReasonInvalidConfig, msg)
		return errStop
	}
	rendered, err := resources.Render(st.ep, st.now)
	if err != nil {
		return err
	}
	st.rendered = rendered
	if st.transitioned(v1alpha1.ConditionConfigValid, metav1.ConditionTrue, ReasonValid) &&
		st.previous(v1alpha1.ConditionConfigValid) != nil {
		r.event(st.ep, corev1.EventTypeNormal, EventConfigValid, "Validate", "configuration is valid again")
	}
	st.setCondition(v1alpha1.ConditionConfigValid, metav1.ConditionTrue, ReasonValid,
		"event expressions, guards and templates compile")
	return nil
}
