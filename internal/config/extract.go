package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types/ref"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/event"
	"github.com/hookkeeper/hookkeeper/internal/expr"
)

// Preset holds a provider's default extraction expressions (see the package
// documentation's table). An empty expression means the field is absent by default.
type Preset struct {
	ID, Type, EntityKey, Amount, OccurredAt string
}

// Presets are the provider defaults; spec.event overrides them field by field.
var Presets = map[v1alpha1.ProviderType]Preset{
	v1alpha1.ProviderStripe: {
		ID:         `body.id`,
		Type:       `body.type`,
		EntityKey:  `body.data.object.id`,
		Amount:     `body.data.object.amount`,
		OccurredAt: `body.created`,
	},
	v1alpha1.ProviderAdyen: {
		ID:         `body.pspReference + ":" + body.eventCode + ":" + string(body.success)`,
		Type:       `body.eventCode`,
		EntityKey:  `body.merchantReference`,
		Amount:     `body.amount.value`,
		OccurredAt: `body.eventDate`,
	},
	v1alpha1.ProviderGitHub: {
		ID:   `headers["x-github-delivery"]`,
		Type: `headers["x-github-event"] + (has(body.action) ? "." + string(body.action) : "")`,
		EntityKey: `has(body.pull_request) ? body.pull_request.html_url : ` +
			`has(body.issue) ? body.issue.html_url : body.repository.full_name`,
	},
	v1alpha1.ProviderStandardWebhooks: {
		ID:         `headers["webhook-id"]`,
		Type:       `body.type`,
		EntityKey:  `body.data.id`,
		Amount:     `body.data.amount`,
		OccurredAt: `body.timestamp`,
	},
	v1alpha1.ProviderShopify: {
		ID:         `headers["x-shopify-webhook-id"]`,
		Type:       `headers["x-shopify-topic"]`,
		EntityKey:  `body.id`,
		OccurredAt: `headers["x-shopify-triggered-at"]`,
	},
	v1alpha1.ProviderSlack: {
		ID:         `body.event_id`,
		Type:       `body.event.type`,
		EntityKey:  `body.event.channel`,
		OccurredAt: `body.event_time`,
	},
	v1alpha1.ProviderHMAC: {
		ID:   `body.id`,
		Type: `body.type`,
	},
}

// Extractor reads events out of verified requests with CEL programs compiled once. It
// is immutable and safe for concurrent use.
type Extractor struct {
	provider   v1alpha1.ProviderType
	id, typ    *expr.Program
	entityKey  *expr.Program
	amount     *expr.Program
	occurredAt *expr.Program
	// dropHeader is the provider's signature header (HMAC spec), never stored.
	dropHeader string
}

// NewExtractorEnv returns the CEL environment of extraction expressions.
func NewExtractorEnv() (*cel.Env, error) {
	return expr.NewEnv(
		cel.Variable("body", cel.DynType),
		cel.Variable("headers", cel.MapType(cel.StringType, cel.StringType)),
	)
}

// NewExtractor compiles the provider preset merged with spec.event.
func NewExtractor(spec v1alpha1.WebhookEndpointSpec) (*Extractor, error) {
	preset, ok := Presets[spec.Provider.Type]
	if !ok {
		return nil, expr.Errorf("spec.provider.type", "unknown provider %q", spec.Provider.Type)
	}
	env, err := NewExtractorEnv()
	if err != nil {
		return nil, err
	}
	x := &Extractor{provider: spec.Provider.Type}
	if spec.Provider.HMAC != nil {
		x.dropHeader = strings.ToLower(spec.Provider.HMAC.Header)
	}
	pick := func(override, def string) string {
		if strings.TrimSpace(override) != "" {
			return override
		}
		return def
	}
	str := []*cel.Type{cel.StringType, cel.IntType, cel.UintType}
	num := []*cel.Type{cel.IntType, cel.UintType, cel.DoubleType, cel.StringType}
	tim := []*cel.Type{cel.TimestampType, cel.IntType, cel.UintType, cel.DoubleType, cel.StringType}
	fields := []struct {
		dst      **expr.Program
		name     string
		src      string
		allowed  []*cel.Type
		required bool
	}{
		{&x.id, "id", pick(spec.Event.ID, preset.ID), str, true},
		{&x.typ, "type", pick(spec.Event.Type, preset.Type), []*cel.Type{cel.StringType}, true},
		{&x.entityKey, "entityKey", pick(spec.Event.EntityKey, preset.EntityKey), str, false},
		{&x.amount, "amount", pick(spec.Event.Amount, preset.Amount), num, false},
		{&x.occurredAt, "occurredAt", pick(spec.Event.OccurredAt, preset.OccurredAt), tim, false},
	}
	var errs []error
	for _, f := range fields {
		field := "spec.event." + f.name
		if f.src == "" {
			if f.required {
				errs = append(errs, expr.Errorf(field, "provider %s has no preset for %s; set it", spec.Provider.Type, f.name))
			}
			continue
		}
		prg, err := expr.Compile(env, field, f.src, f.allowed, nil)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		*f.dst = prg
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return x, nil
}

// ErrBadPayload wraps every Extract error: the receiver answers 400.
var ErrBadPayload = errors.New("bad payload")

// Extract reads the events of a verified request. Adyen requests yield one event per
// notificationItems[].NotificationRequestItem (body is the item); every other provider
// yields one. id and type are required: a payload without them is an error (400).
// entityKey, amount and occurredAt are optional: when their expression fails on a
// payload (a missing field, a value of the wrong shape) the field is left empty, so an
// event the state machine does not care about is still recorded and acknowledged.
func (x *Extractor) Extract(body []byte, header http.Header) ([]event.Event, error) {
	headers := KeptHeaders(header, x.dropHeader)
	payload, err := jsonPayload(body, header)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadPayload, err)
	}
	if x.provider != v1alpha1.ProviderAdyen {
		ev, err := x.extractOne(payload, headers)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadPayload, err)
		}
		return []event.Event{ev}, nil
	}
	items, err := AdyenItems(payload)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadPayload, err)
	}
	evs := make([]event.Event, 0, len(items))
	for i, item := range items {
		ev, err := x.extractOne(item, headers)
		if err != nil {
			return nil, fmt.Errorf("%w: notificationItems[%d]: %w", ErrBadPayload, i, err)
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// AdyenItems returns the raw JSON of each notificationItems[].NotificationRequestItem.
func AdyenItems(payload []byte) ([]json.RawMessage, error) {
	var batch struct {
		NotificationItems []struct {
			Item json.RawMessage `json:"NotificationRequestItem"`
		} `json:"notificationItems"`
	}
	if err := json.Unmarshal(payload, &batch); err != nil {
		return nil, fmt.Errorf("parse Adyen notification: %w", err)
	}
	if len(batch.NotificationItems) == 0 {
		return nil, errors.New("the Adyen notification has no notificationItems")
	}
	items := make([]json.RawMessage, len(batch.NotificationItems))
	for i, it := range batch.NotificationItems {
		if len(it.Item) == 0 || string(it.Item) == "null" {
			return nil, fmt.Errorf("notificationItems[%d] has no NotificationRequestItem", i)
		}
		items[i] = it.Item
	}
	return items, nil
}

func (x *Extractor) extractOne(raw []byte, headers map[string]string) (event.Event, error) {
	parsed, err := expr.DecodeJSON(raw)
	if err != nil {
		return event.Event{}, err
	}
	body, ok := parsed.(map[string]any)
	if !ok {
		return event.Event{}, errors.New("payload is not a JSON object")
	}
	vars := map[string]any{"body": body, "headers": headers}
	ev := event.Event{Payload: json.RawMessage(raw), Headers: headers, Body: body}

	if ev.ID, err = requiredString(x.id, vars); err != nil {
		return event.Event{}, err
	}
	if ev.Type, err = requiredString(x.typ, vars); err != nil {
		return event.Event{}, err
	}
	if v := optional(x.entityKey, vars); v != nil {
		if s, err := expr.AsString(v); err == nil {
			ev.EntityKey = s
		}
	}
	if v := optional(x.amount, vars); v != nil {
		if n, err := expr.AsInt(v); err == nil {
			ev.Amount = &n
		}
	}
	if v := optional(x.occurredAt, vars); v != nil {
		if t, err := expr.AsTime(v); err == nil {
			ev.OccurredAt = &t
		}
	}
	return ev, nil
}

func requiredString(p *expr.Program, vars map[string]any) (string, error) {
	v, err := p.Eval(vars)
	if err != nil {
		return "", err
	}
	if expr.IsNull(v) {
		return "", fmt.Errorf("%s is null", p.Field)
	}
	s, err := expr.AsString(v)
	if err != nil {
		return "", fmt.Errorf("%s: %w", p.Field, err)
	}
	if s == "" {
		return "", fmt.Errorf("%s is empty", p.Field)
	}
	return s, nil
}

func optional(p *expr.Program, vars map[string]any) ref.Val {
	if p == nil {
		return nil
	}
	v, err := p.Eval(vars)
	if err != nil || expr.IsNull(v) {
		return nil
	}
	return v
}

// jsonPayload returns the JSON document of a request: the body, or for form-encoded
// requests (GitHub's form content type, Slack interactivity) the `payload` field.
func jsonPayload(body []byte, header http.Header) ([]byte, error) {
	// An unparsable Content-Type is treated as JSON: the body parse then decides.
	if mt, _, _ := mime.ParseMediaType(header.Get("Content-Type")); mt != "application/x-www-form-urlencoded" {
		return body, nil
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, errors.New("form body cannot be parsed")
	}
	p := form.Get("payload")
	if p == "" {
		return nil, errors.New("form body has no payload field")
	}
	return []byte(p), nil
}

// KeptHeaders returns the headers worth storing and showing to CEL: lower-cased names,
// first values, without credentials and signatures (Authorization, Cookie, anything
// naming a signature, HMAC, token, secret or API key, and the HMAC scheme's header).
func KeptHeaders(header http.Header, drop string) map[string]string {
	out := make(map[string]string, len(header))
	for name, values := range header {
		n := strings.ToLower(name)
		if len(values) == 0 || n == drop || sensitiveHeader(n) {
			continue
		}
		out[n] = values[0]
	}
	return out
}

func sensitiveHeader(n string) bool {
	switch n {
	case "authorization", "proxy-authorization", "cookie", "set-cookie":
		return true
	}
	for _, s := range []string{"signature", "hmac", "token", "secret", "api-key", "apikey", "password"} {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

// AckBody is the response body a provider expects for an accepted delivery.
func AckBody(provider v1alpha1.ProviderType) (contentType string, body []byte) {
	if provider == v1alpha1.ProviderAdyen {
		return "text/plain; charset=utf-8", []byte("[accepted]")
	}
	return "application/json", []byte(`{"received":true}`)
}
