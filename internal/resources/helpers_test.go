package resources

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

var now = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

func at(t time.Time) *metav1.Time { mt := metav1.NewTime(t); return &mt }

func sel(name, key string) corev1.SecretKeySelector {
	return corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
}

func endpoint() *v1alpha1.WebhookEndpoint {
	return &v1alpha1.WebhookEndpoint{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop", Generation: 3, ResourceVersion: "77"},
		Spec: v1alpha1.WebhookEndpointSpec{
			Provider: v1alpha1.ProviderSpec{Type: v1alpha1.ProviderStripe},
			SigningSecrets: []v1alpha1.SigningSecret{
				{SecretKeyRef: sel("stripe", "current")},
				{SecretKeyRef: sel("stripe", "previous"), ExpiresAt: at(now.Add(time.Hour))},
			},
			Database: v1alpha1.DatabaseSpec{URLSecretRef: sel("db-app", "uri"), Schema: "hookkeeper"},
			StateMachine: v1alpha1.StateMachineSpec{
				Initial: "pending", States: []string{"pending", "paid"},
				Transitions: []v1alpha1.Transition{{Name: "pay", On: []string{"paid"}, From: []string{"pending"}, To: "paid"}},
			},
			Delivery: v1alpha1.DeliverySpec{Sink: v1alpha1.SinkSpec{URL: "http://app.shop.svc/events"}},
			Receiver: v1alpha1.ReceiverSpec{Replicas: ptr.To[int32](2), Path: "/stripe"},
		},
	}
}

func options(t *testing.T, ep *v1alpha1.WebhookEndpoint, at time.Time) Options {
	t.Helper()
	r, err := Render(ep, at)
	if err != nil {
		t.Fatal(err)
	}
	return Options{Image: "ghcr.io/hookkeeper/hookkeeper:test", Rendered: r, ConfigHash: "abc"}
}
