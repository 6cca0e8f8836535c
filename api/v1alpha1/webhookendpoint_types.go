package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ProviderType names a webhook signature scheme and its payload conventions.
// +kubebuilder:validation:Enum=Stripe;Adyen;GitHub;StandardWebhooks;Shopify;Slack;HMAC;Ed25519;Paddle;Calendly;Razorpay;Paystack;Square;Zoom;Intercom;Linear;Typeform;TwitchEventSub;Discord;Vercel;PagerDuty;HubSpot;GitLab;Bitbucket;Clerk;Resend;Mailgun;Twilio
type ProviderType string

// The supported providers.
const (
	ProviderStripe           ProviderType = "Stripe"
	ProviderAdyen            ProviderType = "Adyen"
	ProviderGitHub           ProviderType = "GitHub"
	ProviderStandardWebhooks ProviderType = "StandardWebhooks"
	ProviderShopify          ProviderType = "Shopify"
	ProviderSlack            ProviderType = "Slack"
	ProviderHMAC             ProviderType = "HMAC"
	ProviderEd25519          ProviderType = "Ed25519"
)

// HMACAlgorithm is the hash function of a configurable HMAC scheme.
// +kubebuilder:validation:Enum=SHA1;SHA256;SHA512
type HMACAlgorithm string

// The supported HMAC hash functions.
const (
	HMACSHA1   HMACAlgorithm = "SHA1"
	HMACSHA256 HMACAlgorithm = "SHA256"
	HMACSHA512 HMACAlgorithm = "SHA512"
)

// SignatureEncoding is how a signature is written in its header.
// +kubebuilder:validation:Enum=Hex;Base64
type SignatureEncoding string

// The supported signature encodings.
const (
	EncodingHex    SignatureEncoding = "Hex"
	EncodingBase64 SignatureEncoding = "Base64"
)

// KeyEncoding is how the signing secret is stored in its Secret.
// +kubebuilder:validation:Enum=Raw;Base64;Hex;Whsec
type KeyEncoding string

// The supported key encodings. Whsec is base64 after a "whsec_" prefix (Standard Webhooks).
const (
	KeyRaw    KeyEncoding = "Raw"
	KeyBase64 KeyEncoding = "Base64"
	KeyHex    KeyEncoding = "Hex"
	KeyWhsec  KeyEncoding = "Whsec"
)

// OnUnmatched says what happens to an authentic event whose entity does not exist.
// +kubebuilder:validation:Enum=Record;Retry;Create
type OnUnmatched string

// The unmatched-entity policies.
const (
	// UnmatchedRecord stores the receipt with outcome "unmatched" and acknowledges; replay
	// can apply it later.
	UnmatchedRecord OnUnmatched = "Record"
	// UnmatchedRetry rolls back and answers 503, so the provider delivers again later.
	UnmatchedRetry OnUnmatched = "Retry"
	// UnmatchedCreate creates the entity in the initial state (managed entity table only).
	// Its amount is that of the first event whose type has a transition out of the
	// initial state, whichever event created it.
	UnmatchedCreate OnUnmatched = "Create"
)

// Ordering is the dispatcher's ordering guarantee.
// +kubebuilder:validation:Enum=PerEntity;None
type Ordering string

// The dispatcher orderings.
const (
	OrderingPerEntity Ordering = "PerEntity"
	OrderingNone      Ordering = "None"
)

// TimestampFormat is how a signed timestamp is written.
// +kubebuilder:validation:Enum=Unix;UnixMilli;RFC3339
type TimestampFormat string

// The timestamp formats.
const (
	TimestampUnix      TimestampFormat = "Unix"
	TimestampUnixMilli TimestampFormat = "UnixMilli"
	TimestampRFC3339   TimestampFormat = "RFC3339"
)

// PublicKeyEncoding is how an Ed25519 public key is stored in its Secret.
// +kubebuilder:validation:Enum=Hex;Base64;Whpk
type PublicKeyEncoding string

// The public key encodings.
const (
	PublicKeyHex    PublicKeyEncoding = "Hex"
	PublicKeyBase64 PublicKeyEncoding = "Base64"
	// PublicKeyWhpk is Standard Webhooks' form: "whpk_" followed by base64.
	PublicKeyWhpk PublicKeyEncoding = "Whpk"
)

// CompositeSpec describes a signature header that carries its own timestamp next to
// one or more signatures, as key/value pairs: `t=1700000000,v1=<sig>,v1=<sig>`
// (Calendly, Stripe) or `ts=1700000000;h1=<sig>` (Paddle).
type CompositeSpec struct {
	// pairSeparator splits the header into pairs, e.g. "," or ";".
	// +kubebuilder:default=","
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4
	// +optional
	PairSeparator string `json:"pairSeparator,omitempty"`

	// keyValueSeparator splits a pair into key and value, e.g. "=".
	// +kubebuilder:default="="
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4
	// +optional
	KeyValueSeparator string `json:"keyValueSeparator,omitempty"`

	// timestampKey is the key of the timestamp pair, e.g. "t" or "ts". When set the
	// pair must appear exactly once, signedContent must use {timestamp}, and the
	// timestamp must be within provider.tolerance of now.
	// +kubebuilder:validation:MaxLength=32
	// +optional
	TimestampKey string `json:"timestampKey,omitempty"`

	// signatureKey is the key of the signature pairs, e.g. "v1" or "h1"; the header may
	// carry several (one per secret during a roll), and one verifying is enough.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	SignatureKey string `json:"signatureKey"`
}

// SchemeSpec is the part of a generic signature scheme that says where the signature
// is and what it covers; the HMAC and Ed25519 schemes share it.
// +kubebuilder:validation:XValidation:rule="!has(self.composite) || (!has(self.prefix) && !has(self.separator) && !has(self.timestampHeader))",message="prefix, separator and timestampHeader do not apply with composite: the composite keys name the signatures and the timestamp"
// +kubebuilder:validation:XValidation:rule="!has(self.signedContent) || self.signedContent.contains('{body}')",message="signedContent must contain {body}: a signature that does not cover the body authenticates nothing"
// +kubebuilder:validation:XValidation:rule="!has(self.signedContent) || !self.signedContent.contains('{timestamp}') || has(self.timestampHeader) || (has(self.composite) && has(self.composite.timestampKey))",message="signedContent uses {timestamp}: set timestampHeader (or composite.timestampKey)"
// +kubebuilder:validation:XValidation:rule="(!has(self.timestampHeader) && !(has(self.composite) && has(self.composite.timestampKey))) || (has(self.signedContent) && self.signedContent.contains('{timestamp}'))",message="timestampHeader (or composite.timestampKey) is set but signedContent does not use {timestamp}, so the timestamp would not be authenticated"
// +kubebuilder:validation:XValidation:rule="has(self.idHeader) == (has(self.signedContent) && self.signedContent.contains('{id}'))",message="idHeader must be set exactly when signedContent uses {id}"
type SchemeSpec struct {
	// header is the request header that carries the signature, e.g. X-Signature.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Header string `json:"header"`

	// prefix is stripped from each signature before decoding, e.g. "sha256=" or "v1,".
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Prefix string `json:"prefix,omitempty"`

	// separator splits a header that carries several signatures (during a key roll),
	// e.g. " " or ",". Empty means the header carries one signature.
	// +optional
	// +kubebuilder:validation:MaxLength=4
	Separator string `json:"separator,omitempty"`

	// composite reads a header of key/value pairs carrying a timestamp and signatures,
	// e.g. `t=...,v1=...`; prefix, separator and timestampHeader do not apply then.
	// +optional
	Composite *CompositeSpec `json:"composite,omitempty"`

	// encoding is how the signature is written in the header.
	// +kubebuilder:default=Hex
	// +optional
	Encoding SignatureEncoding `json:"encoding,omitempty"`

	// signedContent is the template of the signed bytes. Placeholders: {body} (the raw
	// body, required), {timestamp} (the timestamp as sent), {id} (the id header),
	// {method} (the request method), {url} (provider.signedURL).
	// +kubebuilder:default="{body}"
	// +kubebuilder:validation:MaxLength=256
	// +optional
	SignedContent string `json:"signedContent,omitempty"`

	// timestampHeader names the header with the signed timestamp; when set, the
	// timestamp must be within provider.tolerance of now.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	TimestampHeader string `json:"timestampHeader,omitempty"`

	// timestampFormat is how the timestamp is written: Unix seconds, Unix milliseconds
	// or RFC 3339.
	// +kubebuilder:default=Unix
	// +optional
	TimestampFormat TimestampFormat `json:"timestampFormat,omitempty"`

	// idHeader names the header with the delivery id, for the {id} placeholder.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	IDHeader string `json:"idHeader,omitempty"`
}

// HMACSpec describes a generic HMAC signature scheme, for providers without a preset.
type HMACSpec struct {
	SchemeSpec `json:",inline"`

	// algorithm is the HMAC hash function.
	// +kubebuilder:default=SHA256
	// +optional
	Algorithm HMACAlgorithm `json:"algorithm,omitempty"`

	// keyEncoding is how the secret value is stored in the Secret.
	// +kubebuilder:default=Raw
	// +optional
	KeyEncoding KeyEncoding `json:"keyEncoding,omitempty"`
}

// Ed25519Spec describes a generic Ed25519 signature scheme: the provider signs with its
// private key, and each signingSecrets entry holds a public key that verifies.
type Ed25519Spec struct {
	SchemeSpec `json:",inline"`

	// keyEncoding is how the public key (32 bytes) is stored in the Secret.
	// +kubebuilder:default=Hex
	// +optional
	KeyEncoding PublicKeyEncoding `json:"keyEncoding,omitempty"`
}

// RefetchSpec makes critical transitions confirm the provider's current object state
// through the provider's read API before they apply. Stripe is supported.
// +kubebuilder:validation:XValidation:rule="!has(self.baseURL) || size(self.baseURL) == 0 || self.baseURL.lowerAscii().startsWith('https://') || (has(self.allowInsecureHTTP) && self.allowInsecureHTTP)",message="spec.provider.refetch.baseURL must be https (it receives the API key); set allowInsecureHTTP for a local http stand-in"
type RefetchSpec struct {
	// apiKeySecretRef selects the Secret key holding a read-capable API key.
	APIKeySecretRef corev1.SecretKeySelector `json:"apiKeySecretRef"`

	// baseURL of the provider API; empty means the provider's public API. It must be
	// https: the API key is sent to it. http needs allowInsecureHTTP.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	BaseURL string `json:"baseURL,omitempty"`

	// allowInsecureHTTP permits an http baseURL, which sends the API key in clear text:
	// for a local stand-in of the provider's API in tests, never for the real one.
	// +optional
	AllowInsecureHTTP bool `json:"allowInsecureHTTP,omitempty"`

	// transitions lists the names of the transitions that re-fetch before applying.
	// Their guards can use `live`, the fetched object.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	Transitions []string `json:"transitions"`

	// timeout of one provider API call.
	// +kubebuilder:default="5s"
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="refetch.timeout must be a positive duration such as 5s"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// ProviderSpec selects how requests are authenticated and how events are read.
// +kubebuilder:validation:XValidation:rule="has(self.hmac) == (self.type == 'HMAC')",message="provider.hmac is required when provider.type is HMAC and not allowed otherwise"
// +kubebuilder:validation:XValidation:rule="has(self.ed25519) == (self.type == 'Ed25519')",message="provider.ed25519 is required when provider.type is Ed25519 and not allowed otherwise"
// +kubebuilder:validation:XValidation:rule="!has(self.refetch) || self.type == 'Stripe'",message="provider.refetch is supported for provider.type Stripe only"
type ProviderSpec struct {
	// type of the provider; it selects the signature scheme and the event field presets.
	Type ProviderType `json:"type"`

	// tolerance is the accepted age of a signed timestamp, where the scheme signs one.
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="provider.tolerance must be a positive duration such as 5m"
	// +optional
	Tolerance *metav1.Duration `json:"tolerance,omitempty"`

	// hmac configures the generic HMAC scheme; only with type HMAC.
	// +optional
	HMAC *HMACSpec `json:"hmac,omitempty"`

	// ed25519 configures the generic Ed25519 scheme; only with type Ed25519.
	// +optional
	Ed25519 *Ed25519Spec `json:"ed25519,omitempty"`

	// signedURL is the URL the provider sends to, exactly as configured at the
	// provider, for schemes that sign it (Square, Twilio, HubSpot, an HMAC or Ed25519
	// signedContent with {url}). Behind a proxy the receiver cannot know it otherwise.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://`
	SignedURL string `json:"signedURL,omitempty"`

	// refetch confirms the provider's live object before critical transitions apply.
	// +optional
	Refetch *RefetchSpec `json:"refetch,omitempty"`
}

// SigningSecret is one webhook signing secret. Any active secret verifies a request.
type SigningSecret struct {
	// secretKeyRef selects the key of a Secret in the endpoint's namespace.
	SecretKeyRef corev1.SecretKeySelector `json:"secretKeyRef"`

	// expiresAt is when this secret stops verifying; the operator drops it then and the
	// pods roll. Use it for the previous secret during a rotation.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
}

// EventSpec holds CEL expressions over `body` (the signed JSON document), `headers` (a
// map of lower-cased header names to their first value; not signed by most providers,
// see docs/providers.md) and `signed` (what the signature covered: `digest`, the body's
// SHA-256, and `id` and `timestamp` where the scheme signs them). Provider presets fill
// in what is left empty.
type EventSpec struct {
	// id evaluates to the provider's stable event id (string); it is the dedupe key.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	ID string `json:"id,omitempty"`
	// type evaluates to the event type (string) matched against transitions[].on.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Type string `json:"type,omitempty"`
	// entityKey evaluates to the key of the entity the event changes (string).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	EntityKey string `json:"entityKey,omitempty"`
	// amount evaluates to the amount in minor units (int), exposed to guards as event.amount.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Amount string `json:"amount,omitempty"`
	// occurredAt evaluates to when the event happened (Unix seconds as int, or an RFC 3339
	// string); an event older than the entity's last applied event is ignored as stale.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	OccurredAt string `json:"occurredAt,omitempty"`
}

// DatabaseSpec says where the receipts, entities and outbox live.
type DatabaseSpec struct {
	// urlSecretRef selects a Secret key holding a PostgreSQL URL
	// (CloudNativePG's <cluster>-app Secret, key uri, works as is).
	URLSecretRef corev1.SecretKeySelector `json:"urlSecretRef"`

	// schema holds hookkeeper's tables; it is created by the migration Job. It is
	// immutable: the receipts that make a copy of an event a duplicate live in it, so
	// an endpoint on a new, empty schema would apply again every event its provider
	// re-sends. To move, create a new endpoint (docs/operations.md).
	// +kubebuilder:default=hookkeeper
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]{0,62}$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="schema is immutable: the receipts that make a re-sent event a duplicate live in it; create a new endpoint to use another schema"
	// +optional
	Schema string `json:"schema,omitempty"`

	// maxConnections per receiver pod.
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=200
	// +optional
	MaxConnections int32 `json:"maxConnections,omitempty"`
}

// TenantSpec scopes every statement on the app's table to one tenant.
type TenantSpec struct {
	// column holding the tenant id.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Column string `json:"column"`
	// value of the tenant column for this endpoint.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Value string `json:"value"`
}

// EntityTableSpec binds the state machine to the application's own table.
type EntityTableSpec struct {
	// schema of the table.
	// +kubebuilder:default=public
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Schema string `json:"schema,omitempty"`
	// name of the table.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// keyColumn matched against event.entityKey.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	KeyColumn string `json:"keyColumn"`
	// stateColumn holds the state (text).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	StateColumn string `json:"stateColumn"`
	// amountColumn holds the expected amount, exposed to guards as entity.amount.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	AmountColumn string `json:"amountColumn,omitempty"`
	// tenant scopes the table to one tenant.
	// +optional
	Tenant *TenantSpec `json:"tenant,omitempty"`
}

// EntitySpec says where the state of each entity lives.
// +kubebuilder:validation:XValidation:rule="!(has(self.table) && self.onUnmatched == 'Create')",message="entity.onUnmatched Create needs the managed entity table; remove entity.table or choose Record or Retry"
type EntitySpec struct {
	// table binds to the app's own table; omit it to use hookkeeper's managed entity table.
	// +optional
	Table *EntityTableSpec `json:"table,omitempty"`

	// onUnmatched is what happens to an event whose entity does not exist.
	// +kubebuilder:default=Record
	// +optional
	OnUnmatched OnUnmatched `json:"onUnmatched,omitempty"`
}

// Transition moves an entity from one of `from` to `to` when an event of a type in `on`
// arrives and the guard holds.
type Transition struct {
	// name of the transition, unique in the state machine.
	// +kubebuilder:validation:Pattern=`^[A-Za-z][A-Za-z0-9_.-]{0,62}$`
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// on lists the event types that trigger the transition. Quote the key in YAML
	// ("on": [...]): YAML 1.1 parsers, kubectl's among them, read a bare on as true, and
	// the apiserver then refuses the transition (kubectl apply, with its strict field
	// validation: unknown field "spec.stateMachine.transitions[0].true"; otherwise: on
	// is required).
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=256
	// +listType=set
	On []string `json:"on"`
	// from lists the states the transition may start from.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=63
	// +listType=set
	From []string `json:"from"`
	// to is the state after the transition.
	// +kubebuilder:validation:MaxLength=63
	To string `json:"to"`
	// guard is a CEL boolean over `event` (id, type, entityKey, amount, occurredAt, body,
	// headers), `entity` (key, state, amount) and, with refetch, `live`.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Guard string `json:"guard,omitempty"`
	// emit is the outbox event type written when the transition applies; empty emits nothing.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Emit string `json:"emit,omitempty"`
}

// StateMachineSpec is the table of allowed transitions. Transitions only move forward
// from listed states, so duplicates, stale and out-of-order events are harmless no-ops.
// +kubebuilder:validation:XValidation:rule="self.initial in self.states",messageExpression="'stateMachine.initial ' + self.initial + ' is not one of stateMachine.states'"
// The apiserver's CEL cost estimator rejects list comprehensions (filter, map) in a
// messageExpression, so each transition index gets its own rule: that is what lets the
// message name the offending transition and state. maxItems of transitions bounds them.
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 0 || self.transitions[0].to in self.states",messageExpression="'transition ' + self.transitions[0].name + ': to ' + self.transitions[0].to + ' is not one of stateMachine.states [' + self.states.join(', ') + ']'"
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 0 || self.transitions[0].from.all(f, f in self.states)",messageExpression="'transition ' + self.transitions[0].name + ': from [' + self.transitions[0].from.join(', ') + '] names a state that is not one of stateMachine.states [' + self.states.join(', ') + ']'"
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 1 || self.transitions[1].to in self.states",messageExpression="'transition ' + self.transitions[1].name + ': to ' + self.transitions[1].to + ' is not one of stateMachine.states [' + self.states.join(', ') + ']'"
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 1 || self.transitions[1].from.all(f, f in self.states)",messageExpression="'transition ' + self.transitions[1].name + ': from [' + self.transitions[1].from.join(', ') + '] names a state that is not one of stateMachine.states [' + self.states.join(', ') + ']'"
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 2 || self.transitions[2].to in self.states",messageExpression="'transition ' + self.transitions[2].name + ': to ' + self.transitions[2].to + ' is not one of stateMachine.states [' + self.states.join(', ') + ']'"
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 2 || self.transitions[2].from.all(f, f in self.states)",messageExpression="'transition ' + self.transitions[2].name + ': from [' + self.transitions[2].from.join(', ') + '] names a state that is not one of stateMachine.states [' + self.states.join(', ') + ']'"
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 3 || self.transitions[3].to in self.states",messageExpression="'transition ' + self.transitions[3].name + ': to ' + self.transitions[3].to + ' is not one of stateMachine.states [' + self.states.join(', ') + ']'"
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 3 || self.transitions[3].from.all(f, f in self.states)",messageExpression="'transition ' + self.transitions[3].name + ': from [' + self.transitions[3].from.join(', ') + '] names a state that is not one of stateMachine.states [' + self.states.join(', ') + ']'"
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 4 || self.transitions[4].to in self.states",messageExpression="'transition ' + self.transitions[4].name + ': to ' + self.transitions[4].to + ' is not one of stateMachine.states [' + self.states.join(', ') + ']'"
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 4 || self.transitions[4].from.all(f, f in self.states)",messageExpression="'transition ' + self.transitions[4].name + ': from [' + self.transitions[4].from.join(', ') + '] names a state that is not one of stateMachine.states [' + self.states.join(', ') + ']'"
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 5 || self.transitions[5].to in self.states",messageExpression="'transition ' + self.transitions[5].name + ': to ' + self.transitions[5].to + ' is not one of stateMachine.states [' + self.states.join(', ') + ']'"
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 5 || self.transitions[5].from.all(f, f in self.states)",messageExpression="'transition ' + self.transitions[5].name + ': from [' + self.transitions[5].from.join(', ') + '] names a state that is not one of stateMachine.states [' + self.states.join(', ') + ']'"
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 6 || self.transitions[6].to in self.states",messageExpression="'transition ' + self.transitions[6].name + ': to ' + self.transitions[6].to + ' is not one of stateMachine.states [' + self.states.join(', ') + ']'"
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 6 || self.transitions[6].from.all(f, f in self.states)",messageExpression="'transition ' + self.transitions[6].name + ': from [' + self.transitions[6].from.join(', ') + '] names a state that is not one of stateMachine.states [' + self.states.join(', ') + ']'"
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 7 || self.transitions[7].to in self.states",messageExpression="'transition ' + self.transitions[7].name + ': to ' + self.transitions[7].to + ' is not one of stateMachine.states [' + self.states.join(', ') + ']'"
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 7 || self.transitions[7].from.all(f, f in self.states)",messageExpression="'transition ' + self.transitions[7].name + ': from [' + self.transitions[7].from.join(', ') + '] names a state that is not one of stateMachine.states [' + self.states.join(', ') + ']'"
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 8 || self.transitions[8].to in self.states",messageExpression="'transition ' + self.transitions[8].name + ': to ' + self.transitions[8].to + ' is not one of stateMachine.states [' + self.states.join(', ') + ']'"
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 8 || self.transitions[8].from.all(f, f in self.states)",messageExpression="'transition ' + self.transitions[8].name + ': from [' + self.transitions[8].from.join(', ') + '] names a state that is not one of stateMachine.states [' + self.states.join(', ') + ']'"
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 9 || self.transitions[9].to in self.states",messageExpression="'transition ' + self.transitions[9].name + ': to ' + self.transitions[9].to + ' is not one of stateMachine.states [' + self.states.join(', ') + ']'"
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 9 || self.transitions[9].from.all(f, f in self.states)",messageExpression="'transition ' + self.transitions[9].name + ': from [' + self.transitions[9].from.join(', ') + '] names a state that is not one of stateMachine.states [' + self.states.join(', ') + ']'"
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 10 || self.transitions[10].to in self.states",messageExpression="'transition ' + self.transitions[10].name + ': to ' + self.transitions[10].to + ' is not one of stateMachine.states [' + self.states.join(', ') + ']'"
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 10 || self.transitions[10].from.all(f, f in self.states)",messageExpression="'transition ' + self.transitions[10].name + ': from [' + self.transitions[10].from.join(', ') + '] names a state that is not one of stateMachine.states [' + self.states.join(', ') + ']'"
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 11 || self.transitions[11].to in self.states",messageExpression="'transition ' + self.transitions[11].name + ': to ' + self.transitions[11].to + ' is not one of stateMachine.states [' + self.states.join(', ') + ']'"
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 11 || self.transitions[11].from.all(f, f in self.states)",messageExpression="'transition ' + self.transitions[11].name + ': from [' + self.transitions[11].from.join(', ') + '] names a state that is not one of stateMachine.states [' + self.states.join(', ') + ']'"
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 12 || self.transitions[12].to in self.states",messageExpression="'transition ' + self.transitions[12].name + ': to ' + self.transitions[12].to + ' is not one of stateMachine.states [' + self.states.join(', ') + ']'"
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 12 || self.transitions[12].from.all(f, f in self.states)",messageExpression="'transition ' + self.transitions[12].name + ': from [' + self.transitions[12].from.join(', ') + '] names a state that is not one of stateMachine.states [' + self.states.join(', ') + ']'"
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 13 || self.transitions[13].to in self.states",messageExpression="'transition ' + self.transitions[13].name + ': to ' + self.transitions[13].to + ' is not one of stateMachine.states [' + self.states.join(', ') + ']'"
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 13 || self.transitions[13].from.all(f, f in self.states)",messageExpression="'transition ' + self.transitions[13].name + ': from [' + self.transitions[13].from.join(', ') + '] names a state that is not one of stateMachine.states [' + self.states.join(', ') + ']'"
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 14 || self.transitions[14].to in self.states",messageExpression="'transition ' + self.transitions[14].name + ': to ' + self.transitions[14].to + ' is not one of stateMachine.states [' + self.states.join(', ') + ']'"
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 14 || self.transitions[14].from.all(f, f in self.states)",messageExpression="'transition ' + self.transitions[14].name + ': from [' + self.transitions[14].from.join(', ') + '] names a state that is not one of stateMachine.states [' + self.states.join(', ') + ']'"
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 15 || self.transitions[15].to in self.states",messageExpression="'transition ' + self.transitions[15].name + ': to ' + self.transitions[15].to + ' is not one of stateMachine.states [' + self.states.join(', ') + ']'"
// +kubebuilder:validation:XValidation:rule="size(self.transitions) <= 15 || self.transitions[15].from.all(f, f in self.states)",messageExpression="'transition ' + self.transitions[15].name + ': from [' + self.transitions[15].from.join(', ') + '] names a state that is not one of stateMachine.states [' + self.states.join(', ') + ']'"
type StateMachineSpec struct {
	// initial is the state of an entity created by onUnmatched Create.
	// +kubebuilder:validation:MaxLength=63
	Initial string `json:"initial"`
	// states lists every state.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=63
	// +listType=set
	States []string `json:"states"`
	// transitions lists the allowed moves.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	Transitions []Transition `json:"transitions"`
	// parkFor is how long an event that cannot apply yet waits for its entity: its type
	// has a transition that starts from a state the entity can still reach, but not from
	// its current one (it arrived before the event it follows). Such an event is
	// recorded as parked and applied by the transaction that moves the entity there;
	// past parkFor it is recorded as expired. "0s" turns parking off: such events are
	// recorded as ignored_state, as an event that can never apply is.
	// +kubebuilder:default="72h"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('8760h')",message="parkFor must be between 0s and 8760h (one year)"
	// +optional
	ParkFor *metav1.Duration `json:"parkFor,omitempty"`
}

// ServiceReference points at a Service in the endpoint's namespace (or another).
type ServiceReference struct {
	// name of the Service.
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// namespace of the Service; the endpoint's namespace when empty.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
	// port of the Service.
	// +kubebuilder:default=80
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`
	// path of the request.
	// +kubebuilder:default="/"
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Path string `json:"path,omitempty"`
}

// SinkSpec is where the dispatcher POSTs each outbox event; exactly one of url or serviceRef.
// +kubebuilder:validation:XValidation:rule="has(self.url) != has(self.serviceRef)",message="delivery.sink needs exactly one of url or serviceRef"
type SinkSpec struct {
	// url of the sink, http or https.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://`
	URL string `json:"url,omitempty"`
	// serviceRef names an in-cluster Service.
	// +optional
	ServiceRef *ServiceReference `json:"serviceRef,omitempty"`
}

// BackoffSpec is an exponential backoff with full jitter.
type BackoffSpec struct {
	// initial delay before the second attempt.
	// +kubebuilder:default="1s"
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="backoff.initial must be a positive duration such as 1s"
	// +optional
	Initial *metav1.Duration `json:"initial,omitempty"`
	// max delay between attempts.
	// +kubebuilder:default="15m"
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="backoff.max must be a positive duration such as 15m"
	// +optional
	Max *metav1.Duration `json:"max,omitempty"`
}

// DeliverySpec configures the outbox dispatcher.
type DeliverySpec struct {
	// sink receives each outbox event as a POST.
	Sink SinkSpec `json:"sink"`
	// signingSecretRef selects a Standard Webhooks key (whsec_...) used to sign deliveries.
	// +optional
	SigningSecretRef *corev1.SecretKeySelector `json:"signingSecretRef,omitempty"`
	// maxAttempts before a row is dead-lettered.
	// +kubebuilder:default=12
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	MaxAttempts int32 `json:"maxAttempts,omitempty"`
	// backoff between attempts.
	// +kubebuilder:default={initial: "1s", max: "15m"}
	// +optional
	Backoff BackoffSpec `json:"backoff,omitempty"`
	// timeout of one delivery attempt.
	// +kubebuilder:default="10s"
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="delivery.timeout must be a positive duration such as 10s"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// ordering PerEntity delivers an entity's events one at a time in order; None does not.
	// +kubebuilder:default=PerEntity
	// +optional
	Ordering Ordering `json:"ordering,omitempty"`
	// concurrency is the number of deliveries in flight per pod.
	// +kubebuilder:default=16
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=256
	// +optional
	Concurrency int32 `json:"concurrency,omitempty"`
}

// ReceiverSpec shapes the receiver Deployment.
// +kubebuilder:validation:XValidation:rule="!has(self.poolRef) || !has(self.autoscaling)",message="receiver.autoscaling applies to an endpoint's own receivers: a pooled endpoint scales with its pool (spec.autoscaling of the WebhookReceiverPool)"
type ReceiverSpec struct {
	// replicas of the receiver; a PodDisruptionBudget is created when more than one.
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=0
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`
	// path the receiver accepts webhooks on.
	// +kubebuilder:default="/"
	// +kubebuilder:validation:Pattern=`^/`
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Path string `json:"path,omitempty"`
	// maxBodyBytes larger bodies get 413.
	// +kubebuilder:default=1048576
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=33554432
	// +optional
	MaxBodyBytes int64 `json:"maxBodyBytes,omitempty"`
	// maxInFlight caps the webhook requests one receiver pod handles at once; beyond it
	// a request gets 503 with Retry-After before its body is read. It bounds the
	// memory of a pod (at most maxInFlight bodies of up to maxBodyBytes each).
	// +kubebuilder:default=64
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4096
	// +optional
	MaxInFlight int32 `json:"maxInFlight,omitempty"`
	// resources of the receiver container; the operator's defaults when empty.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
	// image overrides the receiver image (the operator's own image by default). The pods
	// get the Secrets the endpoints name, so the operator runs only images its
	// administrator allowed (the manager's --allowed-receiver-images); any other stops
	// at ConfigValid (an endpoint) or Stalled (a pool).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`
	// poolRef has a WebhookReceiverPool of this namespace serve the endpoint, at
	// /<name> followed by path, instead of a Deployment of its own; replicas,
	// resources, image and autoscaling are then the pool's. The endpoint's schema and
	// outbox stay its own, so moving it in or out of a pool loses nothing.
	// +optional
	PoolRef *PoolReference `json:"poolRef,omitempty"`
	// autoscaling hands the dedicated receivers' replicas to a HorizontalPodAutoscaler.
	// +optional
	Autoscaling *AutoscalingSpec `json:"autoscaling,omitempty"`
}

// ToggleSpec switches an optional object on or off.
type ToggleSpec struct {
	// A pointer, so that an explicit false survives Go clients: a plain bool with
	// omitempty drops false and the API server defaults it back to true.

	// enabled creates the object when its CRD is installed.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
}

// LabelValue is a Kubernetes label value: at most 63 alphanumerics, '-', '_' or '.',
// starting and ending alphanumeric, or empty. (A named type so the CRD bounds each
// value, which a rule over a map of plain strings cannot afford.)
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:Pattern=`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`
type LabelValue string

// MonitoringSpec configures Prometheus Operator objects, created only when their CRDs exist.
type MonitoringSpec struct {
	// serviceMonitor scrapes the receiver pods.
	// +kubebuilder:default={enabled: true}
	// +optional
	ServiceMonitor ToggleSpec `json:"serviceMonitor,omitempty"`
	// prometheusRule holds the endpoint's alerts.
	// +kubebuilder:default={enabled: true}
	// +optional
	PrometheusRule ToggleSpec `json:"prometheusRule,omitempty"`
	// labels are added to the metadata of the ServiceMonitor and the PrometheusRule, so
	// the Prometheus that selects them by label picks them up: a default
	// kube-prometheus-stack selects `release: <its Helm release name>`. They are merged
	// over the operator-wide labels (the manager's --monitoring-labels, the chart's
	// monitoring.labels), these winning on the same key. The operator's own labels
	// (app.kubernetes.io/name, instance, component, managed-by and part-of) cannot be set
	// here. At most 16 entries; keys and values follow the Kubernetes label syntax.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) <= 317 && k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$') && (k.contains('/') ? (k.split('/')[0].size() <= 253 && k.split('/')[1].size() <= 63) : k.size() <= 63))",message="monitoring.labels keys must be label keys: an optional DNS subdomain prefix (at most 253 characters) and '/', then a name of at most 63 alphanumerics, '-', '_' or '.' that starts and ends alphanumeric"
	// +kubebuilder:validation:XValidation:rule="!self.exists(k, k in ['app.kubernetes.io/name', 'app.kubernetes.io/instance', 'app.kubernetes.io/component', 'app.kubernetes.io/managed-by', 'app.kubernetes.io/part-of'])",message="monitoring.labels cannot set the operator's own labels (app.kubernetes.io/name, instance, component, managed-by, part-of)"
	Labels map[string]LabelValue `json:"labels,omitempty"`
}

// ParentReference names a Gateway (or a listener of one) for an HTTPRoute.
type ParentReference struct {
	// name of the Gateway.
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// namespace of the Gateway; the endpoint's namespace when empty.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
	// sectionName selects a listener of the Gateway.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	SectionName string `json:"sectionName,omitempty"`
}

// HTTPRouteExposure publishes the endpoint through a Gateway API HTTPRoute.
type HTTPRouteExposure struct {
	// parentRefs are the Gateways that serve the route.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	ParentRefs []ParentReference `json:"parentRefs"`
	// hostnames of the route.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=253
	Hostnames []string `json:"hostnames"`
	// path prefix routed to the receiver; receiver.path when empty. A different prefix
	// is rewritten to receiver.path by the route.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Path string `json:"path,omitempty"`
}

// IngressExposure publishes the endpoint through a networking.k8s.io Ingress.
type IngressExposure struct {
	// className of the Ingress controller.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ClassName string `json:"className,omitempty"`
	// host the Ingress serves.
	// +kubebuilder:validation:MaxLength=253
	Host string `json:"host"`
	// path routed to the receiver: empty (receiver.path) or equal to receiver.path. An
	// Ingress does not rewrite paths, so a different path would reach a receiver that
	// answers 404; set receiver.path to the public path instead.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Path string `json:"path,omitempty"`
	// tlsSecretName holds the certificate (cert-manager can write it).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	TLSSecretName string `json:"tlsSecretName,omitempty"`
	// annotations added to the Ingress, e.g. cert-manager.io/cluster-issuer.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// EgressSpec limits where receiver pods may connect. Empty lists leave egress open.
type EgressSpec struct {
	// databaseCIDRs the pods may reach on databasePort.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	DatabaseCIDRs []string `json:"databaseCIDRs,omitempty"`
	// databasePort of PostgreSQL.
	// +kubebuilder:default=5432
	// +optional
	DatabasePort int32 `json:"databasePort,omitempty"`
	// sinkCIDRs the pods may reach on sinkPorts.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	SinkCIDRs []string `json:"sinkCIDRs,omitempty"`
	// sinkPorts of the sink.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	SinkPorts []int32 `json:"sinkPorts,omitempty"`
}

// NetworkPolicySpec fences the receiver pods.
type NetworkPolicySpec struct {
	// A pointer for the same reason as ToggleSpec.Enabled.

	// enabled creates the NetworkPolicy.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// metricsFrom selects the namespaces allowed to scrape the metrics port (9090), e.g.
	// {matchLabels: {kubernetes.io/metadata.name: monitoring}} for a Prometheus in the
	// monitoring namespace. It replaces the default, pods of the endpoint's (or pool's)
	// own namespace only; an empty selector admits every namespace.
	// +optional
	MetricsFrom *metav1.LabelSelector `json:"metricsFrom,omitempty"`
	// egress, when set, limits the pods to DNS, the database and the sink.
	// +optional
	Egress *EgressSpec `json:"egress,omitempty"`
}

// ExposureSpec publishes the receiver outside the cluster; at most one of httpRoute or ingress.
// +kubebuilder:validation:XValidation:rule="!(has(self.httpRoute) && has(self.ingress))",message="exposure takes one of httpRoute or ingress, not both"
type ExposureSpec struct {
	// httpRoute publishes through a Gateway API HTTPRoute.
	// +optional
	HTTPRoute *HTTPRouteExposure `json:"httpRoute,omitempty"`
	// ingress publishes through an Ingress.
	// +optional
	Ingress *IngressExposure `json:"ingress,omitempty"`
}

// WebhookEndpointSpec is the desired receiver.
// An Ingress forwards the request path unchanged and the receiver serves receiver.path
// only, so exposure.ingress.path must be empty or equal to it.
// +kubebuilder:validation:XValidation:rule="!has(self.exposure) || !has(self.exposure.ingress) || !has(self.exposure.ingress.path) || size(self.exposure.ingress.path) == 0 || self.exposure.ingress.path == (has(self.receiver) && has(self.receiver.path) ? self.receiver.path : '/')",message="exposure.ingress.path must be empty or equal to receiver.path: an Ingress does not rewrite paths and the receiver answers 404 on any other path; set receiver.path to the public path instead",fieldPath=".exposure.ingress.path"
// A parked event that expires can be re-driven only while its payload is kept, so
// payloads outlive parking.
// +kubebuilder:validation:XValidation:rule="!has(self.retention) || !has(self.retention.payloadFor) || duration(self.retention.payloadFor) == duration('0s') || duration(self.retention.payloadFor) > duration(has(self.stateMachine.parkFor) ? self.stateMachine.parkFor : '72h')",message="retention.payloadFor must be 0s (forever) or longer than stateMachine.parkFor: an event that expires after parkFor can be re-driven only while its payload is kept",fieldPath=".retention.payloadFor"
// +kubebuilder:validation:XValidation:rule="!has(self.receiver) || !has(self.receiver.poolRef) || !has(self.exposure)",message="an endpoint served by a pool (receiver.poolRef) is exposed by its pool: set the WebhookReceiverPool's spec.exposure, and remove exposure here"
type WebhookEndpointSpec struct {
	// provider selects the signature scheme and presets.
	Provider ProviderSpec `json:"provider"`
	// signingSecrets verify requests; any one verifies; the first is the primary.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=4
	SigningSecrets []SigningSecret `json:"signingSecrets"`
	// event says how to read id, type, entity key, amount and time from a payload.
	// +optional
	Event EventSpec `json:"event,omitempty"`
	// database holds receipts, entities and the outbox.
	Database DatabaseSpec `json:"database"`
	// entity says where the state lives.
	// +optional
	Entity EntitySpec `json:"entity,omitempty"`
	// stateMachine is the table of allowed transitions.
	StateMachine StateMachineSpec `json:"stateMachine"`
	// delivery sends each outbox event to the app.
	Delivery DeliverySpec `json:"delivery"`
	// receiver shapes the receiver pods.
	// +kubebuilder:default={replicas: 2}
	// +optional
	Receiver ReceiverSpec `json:"receiver,omitempty"`
	// monitoring creates a ServiceMonitor and PrometheusRule when their CRDs exist.
	// +kubebuilder:default={serviceMonitor: {enabled: true}, prometheusRule: {enabled: true}}
	// +optional
	Monitoring MonitoringSpec `json:"monitoring,omitempty"`
	// exposure publishes the endpoint over HTTPS.
	// +optional
	Exposure *ExposureSpec `json:"exposure,omitempty"`
	// networkPolicy fences the receiver pods.
	// +kubebuilder:default={enabled: true}
	// +optional
	NetworkPolicy NetworkPolicySpec `json:"networkPolicy,omitempty"`
	// retention bounds how long payloads, dedupe records and delivered outbox rows are
	// kept. Parked events and undelivered outbox rows are never pruned.
	// +kubebuilder:default={payloadFor: "720h", dedupeFor: "9600h", deliveredFor: "168h"}
	// +optional
	Retention RetentionSpec `json:"retention,omitempty"`
}

// RetentionSpec says how long the receivers keep what they store; each receiver pod
// prunes in small batches (one replica at a time), so receiving is not slowed. "0s"
// keeps that kind of data forever.
// +kubebuilder:validation:XValidation:rule="!has(self.payloadFor) || !has(self.dedupeFor) || duration(self.dedupeFor) == duration('0s') || (duration(self.payloadFor) != duration('0s') && duration(self.dedupeFor) >= duration(self.payloadFor))",message="retention.dedupeFor must be 0s (forever) or at least retention.payloadFor: a receipt's dedupe record must outlive its payload"
type RetentionSpec struct {
	// payloadFor keeps each receipt's payload and headers this long after it was
	// received; then they are removed and the dedupe record stays, so a late redelivery
	// is still a duplicate. A receipt replay can only re-run receipts that still have
	// their payload.
	// +kubebuilder:default="720h"
	// +kubebuilder:validation:XValidation:rule="duration(self) == duration('0s') || (duration(self) >= duration('1h') && duration(self) <= duration('87600h'))",message="retention durations must be 0s (forever) or between 1h and 87600h (ten years)"
	// +optional
	PayloadFor *metav1.Duration `json:"payloadFor,omitempty"`
	// dedupeFor keeps each receipt's dedupe record (event id, type, entity key,
	// outcome and times) this long after it was received. A provider that signs no
	// timestamp (Adyen, GitHub, Shopify, ...) can redeliver an old event at any time:
	// only a redelivery later than dedupeFor would be recorded again.
	// +kubebuilder:default="9600h"
	// +kubebuilder:validation:XValidation:rule="duration(self) == duration('0s') || (duration(self) >= duration('1h') && duration(self) <= duration('87600h'))",message="retention durations must be 0s (forever) or between 1h and 87600h (ten years)"
	// +optional
	DedupeFor *metav1.Duration `json:"dedupeFor,omitempty"`
	// deliveredFor keeps an outbox row this long after the sink acknowledged it.
	// Pending, dead-lettered and discarded rows are never pruned.
	// +kubebuilder:default="168h"
	// +kubebuilder:validation:XValidation:rule="duration(self) == duration('0s') || (duration(self) >= duration('1h') && duration(self) <= duration('87600h'))",message="retention durations must be 0s (forever) or between 1h and 87600h (ten years)"
	// +optional
	DeliveredFor *metav1.Duration `json:"deliveredFor,omitempty"`
}

// Condition types of a WebhookEndpoint.
const (
	ConditionReady             = "Ready"
	ConditionConfigValid       = "ConfigValid"
	ConditionSecretsResolved   = "SecretsResolved"
	ConditionDatabaseMigrated  = "DatabaseMigrated"
	ConditionReceiverAvailable = "ReceiverAvailable"
	ConditionExposed           = "Exposed"
	// ConditionSinkHealthy says whether the sink answers the dispatchers: False while
	// they hold deliveries because it is down (with the last error and the backlog),
	// Unknown when the operator cannot read the state they keep in the database.
	ConditionSinkHealthy = "SinkHealthy"
	// ConditionReconciling and ConditionStalled follow the kstatus conventions (abnormal-true):
	// Reconciling=True while the operator is still converging, Stalled=True when it cannot
	// make progress until a person acts. Both are absent when Ready is True.
	ConditionReconciling = "Reconciling"
	ConditionStalled     = "Stalled"
)

// WebhookEndpointStatus is the observed state.
type WebhookEndpointStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// url providers should send webhooks to: the public https URL when exposed, the
	// in-cluster URL otherwise.
	// +optional
	URL string `json:"url,omitempty"`
	// activeSecrets is the number of signing secrets currently verifying.
	// +optional
	ActiveSecrets int32 `json:"activeSecrets,omitempty"`
	// schemaVersion is the database schema version the migration Job applied.
	// +optional
	SchemaVersion int64 `json:"schemaVersion,omitempty"`
	// conditions: Ready, ConfigValid, SecretsResolved, DatabaseMigrated, ReceiverAvailable, Exposed,
	// SinkHealthy, and the kstatus Reconciling and Stalled.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// WebhookEndpoint turns a manifest into a running exactly-once webhook receiver.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=whe;webhook
// The name also names the receivers' Service, which must be a DNS-1035 label: lower-case
// letters, digits and '-', starting with a letter (no dots).
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be lower-case letters, digits and '-', start with a letter and end with a letter or digit (no dots): it also names the receivers' Service"
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.provider.type`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="URL",type=string,JSONPath=`.status.url`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type WebhookEndpoint struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   WebhookEndpointSpec   `json:"spec,omitempty"`
	Status WebhookEndpointStatus `json:"status,omitempty"`
}

// WebhookEndpointList is a list of WebhookEndpoints.
// +kubebuilder:object:root=true
type WebhookEndpointList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WebhookEndpoint `json:"items"`
}

// IsEnabled reports whether the toggle is on; unset means on, as the CRD defaults it.
func (t ToggleSpec) IsEnabled() bool { return t.Enabled == nil || *t.Enabled }

// IsEnabled reports whether the NetworkPolicy is wanted; unset means on, as the CRD
// defaults it.
func (n NetworkPolicySpec) IsEnabled() bool { return n.Enabled == nil || *n.Enabled }
