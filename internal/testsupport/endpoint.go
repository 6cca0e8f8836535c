package testsupport

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// SecretRef is key of Secret name.
func SecretRef(name, key string) corev1.SecretKeySelector {
	return corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
}

// StripeCaptureEndpoint is the smallest Stripe endpoint that records and moves entities,
// as a Go object: its signing secret at signing, its database URL at database,
// unmatched events recorded (not created), and one transition, capture, that
// payment_intent.succeeded takes from payment_pending to paid, emitting order.paid to
// http://sink.local/. It has no name, namespace or schema: tests set what they need.
func StripeCaptureEndpoint(signing, database corev1.SecretKeySelector) *v1alpha1.WebhookEndpoint {
	return &v1alpha1.WebhookEndpoint{
		Spec: v1alpha1.WebhookEndpointSpec{
			Provider:       v1alpha1.ProviderSpec{Type: v1alpha1.ProviderStripe},
			SigningSecrets: []v1alpha1.SigningSecret{{SecretKeyRef: signing}},
			Database:       v1alpha1.DatabaseSpec{URLSecretRef: database},
			Entity:         v1alpha1.EntitySpec{OnUnmatched: v1alpha1.UnmatchedRecord},
			StateMachine: v1alpha1.StateMachineSpec{
				Initial: "payment_pending",
				States:  []string{"payment_pending", "paid"},
				Transitions: []v1alpha1.Transition{{Name: "capture", On: []string{"payment_intent.succeeded"},
					From: []string{"payment_pending"}, To: "paid", Emit: "order.paid"}},
			},
			Delivery: v1alpha1.DeliverySpec{Sink: v1alpha1.SinkSpec{URL: "http://sink.local/"}},
		},
	}
}
