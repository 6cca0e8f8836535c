// Package v1alpha1 contains the hookkeeper.dev/v1alpha1 API: the WebhookEndpoint kind.
// +kubebuilder:object:generate=true
// +groupName=hookkeeper.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the API group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: "hookkeeper.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a runtime.Scheme. It uses
	// apimachinery only, so importing the API does not pull in controller-runtime.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &WebhookEndpoint{}, &WebhookEndpointList{}, &WebhookReplay{}, &WebhookReplayList{},
		&WebhookReceiverPool{}, &WebhookReceiverPoolList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
