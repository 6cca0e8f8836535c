package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PoolReference names a WebhookReceiverPool in the endpoint's own namespace: a pool
// never serves endpoints of another namespace, so Secrets never cross a namespace.
type PoolReference struct {
	// name of the WebhookReceiverPool.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
}

// AutoscalingSpec makes a HorizontalPodAutoscaler own the receivers' replicas: the
// operator creates it and then never sets replicas itself.
// +kubebuilder:validation:XValidation:rule="!has(self.minReplicas) || self.minReplicas <= self.maxReplicas",message="autoscaling.minReplicas must not exceed autoscaling.maxReplicas"
type AutoscalingSpec struct {
	// minReplicas the autoscaler keeps.
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +optional
	MinReplicas *int32 `json:"minReplicas,omitempty"`
	// maxReplicas the autoscaler may reach.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	MaxReplicas int32 `json:"maxReplicas"`
	// targetCPUUtilizationPercentage is the average CPU use, as a share of the CPU
	// request, the autoscaler aims for.
	// +kubebuilder:default=70
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	TargetCPUUtilizationPercentage *int32 `json:"targetCPUUtilizationPercentage,omitempty"`
}

// WebhookReceiverPoolSpec shapes one Deployment of receivers shared by the endpoints
// of its namespace that name it in spec.receiver.poolRef.
// +kubebuilder:validation:XValidation:rule="!has(self.exposure) || !has(self.exposure.ingress) || !has(self.exposure.ingress.path) || size(self.exposure.ingress.path) == 0 || self.exposure.ingress.path == '/'",message="a pool's exposure.ingress.path must be empty or /: an Ingress does not rewrite paths and the pool serves its endpoints under /<name>; use exposure.httpRoute.path for a prefix",fieldPath=".exposure.ingress.path"
type WebhookReceiverPoolSpec struct {
	// replicas of the pool's receivers when autoscaling is off; a
	// PodDisruptionBudget is created when more than one.
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=0
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`
	// autoscaling hands replicas to a HorizontalPodAutoscaler.
	// +optional
	Autoscaling *AutoscalingSpec `json:"autoscaling,omitempty"`
	// maxInFlight caps the webhook requests one pool pod handles at once, all its
	// endpoints together (each endpoint's own receiver.maxInFlight applies as well);
	// beyond it a request gets 503 with Retry-After before its body is read. It bounds
	// the body memory of a pod as an endpoint's own maxInFlight bounds its receivers'.
	// +kubebuilder:default=64
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4096
	// +optional
	MaxInFlight int32 `json:"maxInFlight,omitempty"`
	// resources of each receiver container; the operator's defaults when empty.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
	// image overrides the receiver image (the operator's own image by default). The pods
	// get the Secrets the endpoints name, so the operator runs only images its
	// administrator allowed (the manager's --allowed-receiver-images); any other stops
	// at ConfigValid (an endpoint) or Stalled (a pool).
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`
	// exposure publishes the pool outside the cluster through one HTTPRoute or Ingress
	// on the pool's Service: every member is served under its host at
	// <path>/<endpoint name><its receiver.path>, where an HTTPRoute's path prefix is
	// rewritten away and an Ingress's is /. Members' status.url is then public.
	// +optional
	Exposure *ExposureSpec `json:"exposure,omitempty"`
	// networkPolicy fences the pool's receiver pods as an endpoint's own are fenced:
	// webhooks from anywhere, metrics from the pool's namespace (or metricsFrom), and
	// with egress only DNS, the database port and the sinks. The egress CIDRs and ports
	// must cover every member's database and sink.
	// +kubebuilder:default={enabled: true}
	// +optional
	NetworkPolicy NetworkPolicySpec `json:"networkPolicy,omitempty"`
}

// PoolMember is one endpoint a pool serves, as the pool's status lists it.
type PoolMember struct {
	// name of the WebhookEndpoint.
	Name string `json:"name"`
	// path the pool serves it on: /<name> followed by its spec.receiver.path.
	Path string `json:"path"`
	// loaded is true when the endpoint's config and Secrets were rendered for the
	// pool's receivers; false, with message, when they could not be.
	Loaded bool `json:"loaded"`
	// ready is the endpoint's own Ready condition: loaded, and a receiver of the pool
	// reports it serves the endpoint's current config.
	Ready bool `json:"ready"`
	// message says why an endpoint is not loaded.
	// +optional
	Message string `json:"message,omitempty"`
}

// WebhookReceiverPoolStatus is what the operator saw.
type WebhookReceiverPoolStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// url is the in-cluster base URL of the pool; an endpoint is served under
	// url + "/" + its name.
	// +optional
	URL string `json:"url,omitempty"`
	// publicURL is the https base URL of an exposed pool once its route is accepted
	// (or its Ingress has an address); an endpoint is served under publicURL + "/" +
	// its name.
	// +optional
	PublicURL string `json:"publicURL,omitempty"`
	// replicas and readyReplicas of the pool's Deployment.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// endpointCount is the number of endpoints that name this pool.
	// +optional
	EndpointCount int32 `json:"endpointCount,omitempty"`
	// endpoints the pool serves, by name.
	// +optional
	// +listType=map
	// +listMapKey=name
	Endpoints []PoolMember `json:"endpoints,omitempty"`
	// conditions: Ready, ReceiverAvailable, Exposed (with spec.exposure), and the
	// kstatus Reconciling and Stalled.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// WebhookReceiverPool runs one Deployment of receivers that serves every
// WebhookEndpoint of its namespace whose spec.receiver.poolRef names it, each on its own
// path, so many quiet endpoints share a few pods.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=whpool
// The name also names the receivers' Service, which must be a DNS-1035 label: lower-case
// letters, digits and '-', starting with a letter (no dots).
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be lower-case letters, digits and '-', start with a letter and end with a letter or digit (no dots): it also names the receivers' Service"
// +kubebuilder:printcolumn:name="Endpoints",type=integer,JSONPath=`.status.endpointCount`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type WebhookReceiverPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   WebhookReceiverPoolSpec   `json:"spec,omitempty"`
	Status WebhookReceiverPoolStatus `json:"status,omitempty"`
}

// WebhookReceiverPoolList is a list of WebhookReceiverPools.
// +kubebuilder:object:root=true
type WebhookReceiverPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WebhookReceiverPool `json:"items"`
}
