package config

// The environment contract between the operator (which renders receiver pods) and the
// receiver (which also runs outside Kubernetes with the same variables). One place, so
// the two sides cannot drift.
const (
	// EnvEndpoint holds the WebhookEndpoint (apiVersion, kind, metadata.name,
	// metadata.namespace, spec) as JSON. Outside Kubernetes `--endpoint FILE` replaces it.
	EnvEndpoint = "HOOKKEEPER_ENDPOINT"
	// EnvDatabaseURL holds the PostgreSQL URL (from spec.database.urlSecretRef).
	EnvDatabaseURL = "DATABASE_URL"
	// EnvSigningSecretPrefix + index ("HOOKKEEPER_SIGNING_SECRET_0" ...) holds the value of
	// spec.signingSecrets[index]. Indexes follow the order of spec.signingSecrets.
	EnvSigningSecretPrefix = "HOOKKEEPER_SIGNING_SECRET_"
	// EnvDeliverySecret holds the Standard Webhooks key that signs deliveries
	// (spec.delivery.signingSecretRef).
	EnvDeliverySecret = "HOOKKEEPER_DELIVERY_SECRET"
	// EnvRefetchAPIKey holds the provider API key (spec.provider.refetch.apiKeySecretRef).
	EnvRefetchAPIKey = "HOOKKEEPER_REFETCH_API_KEY" //nolint:gosec // a variable name, not a credential
	// EnvPodIP is the address to listen on (the downward API's status.podIP); all
	// interfaces when empty.
	EnvPodIP = "POD_IP"
	// EnvSinkURL overrides spec.delivery.sink; the operator resolves serviceRef into it.
	EnvSinkURL = "HOOKKEEPER_SINK_URL"
	// EnvPodName is the pod's name (the downward API's metadata.name); a receiver pool
	// writes it into each endpoint's receiver_heartbeats rows.
	EnvPodName = "HOOKKEEPER_POD_NAME"
	// EnvPool is the name of the WebhookReceiverPool a pool pod belongs to.
	EnvPool = "HOOKKEEPER_POOL"
)

// Ports of the receiver pod. The webhook port is the only one a route may expose; the
// admin port serves /metrics, /healthz and /readyz.
const (
	WebhookPort = 8080
	AdminPort   = 9090
)
