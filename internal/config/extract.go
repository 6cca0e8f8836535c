package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types/ref"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/event"
	"github.com/hookkeeper/hookkeeper/internal/expr"
	"github.com/hookkeeper/hookkeeper/internal/provider"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// Extractor reads events out of verified requests with CEL programs compiled once. It
// is immutable and safe for concurrent use.
type Extractor struct {
	provider *provider.Provider
	// tolerance bounds how far in the future an occurredAt may lie (the provider's
	// signature tolerance): a later one is discarded.
	tolerance  time.Duration
	id, typ    *expr.Program
	entityKey  *expr.Program
	amount     *expr.Program
	occurredAt *expr.Program
	// dropHeader is the provider's signature header (HMAC spec), never stored.
	dropHeader string
}

// NewExtractorEnv returns the CEL environment of extraction expressions: body (the
// signed document), headers (as received, mostly unsigned) and signed (the values the
// signature covers besides the body: digest, and id and timestamp where the scheme
// signs them; see signature.Verified.Signed).
func NewExtractorEnv() (*cel.Env, error) {
	return expr.NewEnv(
		cel.Variable("body", cel.DynType),
		cel.Variable("headers", cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable("signed", cel.MapType(cel.StringType, cel.StringType)),
	)
}

// NewExtractor compiles the provider preset merged with spec.event.
func NewExtractor(spec v1alpha1.WebhookEndpointSpec) (*Extractor, error) {
	p, ok := provider.Lookup(spec.Provider.Type)
	if !ok {
		return nil, expr.Errorf("spec.provider.type", "unknown provider %q", spec.Provider.Type)
	}
	env, err := NewExtractorEnv()
	if err != nil {
		return nil, err
	}
	x := &Extractor{provider: p, tolerance: provider.Tolerance(spec.Provider)}
	switch {
	case spec.Provider.HMAC != nil:
		x.dropHeader = strings.ToLower(spec.Provider.HMAC.Header)
	case spec.Provider.Ed25519 != nil:
		x.dropHeader = strings.ToLower(spec.Provider.Ed25519.Header)
	}
	preset := p.Preset
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

// ErrUnstorable wraps (with ErrBadPayload) the Extract error of an authentic event that
// PostgreSQL cannot store unaltered: a JSON document with a \u0000 escape or a lone
// surrogate (jsonb refuses them), a number beyond numeric's range, a key twice in one
// object (parsers disagree on which copy counts), bytes that are not UTF-8, or an id,
// type or entity key with a NUL or invalid UTF-8 (text refuses them). Storing an
// altered copy would record and forward something the provider did not sign, and
// mapping ids could merge two events into one; so the event is refused with a 4xx the
// receiver counts (outcome "unstorable"), instead of failing the transaction with a 503
// on every retry.
var ErrUnstorable = errors.New("the event cannot be stored unaltered")

// MaxKeyBytes is the longest event id, type and entity key an event may have. The id and
// the entity key are keys of btree indexes, whose entries PostgreSQL caps at about 2.7
// KB: a longer one fails the transaction, a 503 on every retry. No provider sends ids
// anywhere near this; an id that is built from an unsigned header (Shopify's and
// Bitbucket's topic) could otherwise be made that long by a replay.
const MaxKeyBytes = 1024

// Extract reads the events of a verified request, from the documents the verifier
// parsed and checked (v.Documents) and never from the raw body: Adyen requests yield
// one event per verified notificationItems[].NotificationRequestItem (body is the
// item); every other provider yields one. The Content-Type header plays no part: which
// document a body holds is decided by its bytes (signature.Document). id and type are
// required: a payload without them is an error (400). entityKey, amount and occurredAt
// are optional: when their expression fails on a payload (a missing field, a value of
// the wrong shape) the field is left empty, so an event the state machine does not care
// about is still recorded and acknowledged. An occurredAt later than the request time
// plus the provider's tolerance is discarded (the event is recorded without a time), so
// no claimed future time moves an entity's clock.
func (x *Extractor) Extract(v *signature.Verified, header http.Header) ([]event.Event, error) {
	docs, err := v.Documents()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadPayload, err)
	}
	headers := KeptHeaders(header, x.dropHeader)
	for name, value := range headers {
		if strings.IndexByte(value, 0) >= 0 || strings.IndexByte(name, 0) >= 0 {
			return nil, fmt.Errorf("%w: %w: header %q holds a NUL byte", ErrBadPayload, ErrUnstorable, name)
		}
	}
	signed := v.Signed()
	if !x.provider.Batch && len(docs) != 1 {
		return nil, fmt.Errorf("%w: expected one document, the verifier returned %d", ErrBadPayload, len(docs))
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("%w: the request carries no event", ErrBadPayload)
	}
	evs := make([]event.Event, 0, len(docs))
	for i, doc := range docs {
		ev, err := x.extractOne(doc, headers, signed, v.Now())
		if err != nil {
			if x.provider.Batch {
				return nil, fmt.Errorf("%w: event %d of the batch: %w", ErrBadPayload, i, err)
			}
			return nil, fmt.Errorf("%w: %w", ErrBadPayload, err)
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

func (x *Extractor) extractOne(raw []byte, headers, signed map[string]string, now time.Time) (event.Event, error) {
	keys, err := storableJSON(raw)
	if err != nil {
		return event.Event{}, err
	}
	parsed, err := expr.DecodeJSON(raw)
	if err != nil {
		return event.Event{}, err
	}
	if err := uniqueKeys(raw, keys, parsed); err != nil {
		return event.Event{}, err
	}
	body, ok := parsed.(map[string]any)
	if !ok {
		return event.Event{}, errors.New("payload is not a JSON object")
	}
	vars := map[string]any{"body": body, "headers": headers, "signed": signed}
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
	for _, f := range []struct{ name, value string }{{"id", ev.ID}, {"type", ev.Type}, {"entityKey", ev.EntityKey}} {
		if !storableText(f.value) {
			return event.Event{}, fmt.Errorf("%w: %s holds a NUL or bytes that are not UTF-8", ErrUnstorable, f.name)
		}
		if len(f.value) > MaxKeyBytes {
			return event.Event{}, fmt.Errorf("%w: %s is %d bytes, more than %d", ErrUnstorable, f.name, len(f.value), MaxKeyBytes)
		}
	}
	if v := optional(x.amount, vars); v != nil {
		if n, err := expr.AsInt(v); err == nil {
			ev.Amount = &n
		}
	}
	if v := optional(x.occurredAt, vars); v != nil {
		// Never beyond the request time plus the tolerance: a claimed future time
		// (a forged header, a broken clock) would make every genuine later event of
		// the entity look stale. Such a time is not believed, and not replaced either.
		// Nor is one before year 1: PostgreSQL (and pgx's encoding) cannot hold every
		// such time, and a transaction failing on it would be a 503 on every retry.
		// Both bounds are also compared in Unix seconds: time.Unix wraps its internal
		// seconds near the int64 bounds, so such a time can look past (or year 1e11)
		// while its Unix seconds are still the number sent.
		if t, err := expr.AsTime(v); err == nil && !now.IsZero() && !t.After(now.Add(x.tolerance)) &&
			t.Unix() >= firstYear && t.Unix() <= now.Add(x.tolerance).Unix() {
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

// storableText reports whether PostgreSQL's text type takes s unaltered.
func storableText(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// storableJSON returns an ErrUnstorable error when PostgreSQL's jsonb would refuse (or
// alter) the JSON text raw: bytes that are not UTF-8, a \u0000 escape, or a \u escape of
// a surrogate that is not a high one followed by a low one. Go's decoder accepts all of
// them (mapping lone surrogates to U+FFFD), so they are looked for in the text itself.
// Malformed JSON is left to the decoder. For well-formed JSON it also returns how many
// keys the text holds (the colons outside strings), which uniqueKeys compares with the
// decoded value.
func storableJSON(raw []byte) (keys int, err error) {
	if !utf8.Valid(raw) {
		return 0, fmt.Errorf("%w: the JSON holds bytes that are not UTF-8", ErrUnstorable)
	}
	inString := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if !inString {
			switch c {
			case '"':
				inString = true
			case ':':
				keys++
			}
			if c == '-' || c >= '0' && c <= '9' {
				j := i
				for j < len(raw) && strings.IndexByte("0123456789+-.eE", raw[j]) >= 0 {
					j++
				}
				if !storableNumber(raw[i:j]) {
					return 0, fmt.Errorf("%w: the JSON holds a number beyond PostgreSQL's numeric range", ErrUnstorable)
				}
				i = j - 1
			}
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			if i+1 >= len(raw) {
				return keys, nil
			}
			if raw[i+1] != 'u' {
				i++
				continue
			}
			code, ok := hex4(raw, i+2)
			if !ok {
				return keys, nil
			}
			i += 5
			switch {
			case code == 0:
				return 0, fmt.Errorf("%w: the JSON holds a \\u0000 escape", ErrUnstorable)
			case code >= 0xDC00 && code <= 0xDFFF:
				return 0, fmt.Errorf("%w: the JSON holds a lone low surrogate escape", ErrUnstorable)
			case code >= 0xD800 && code <= 0xDBFF:
				low, ok := -1, false
				if i+2 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
					low, ok = hex4(raw, i+3)
				}
				if !ok || low < 0xDC00 || low > 0xDFFF {
					return 0, fmt.Errorf("%w: the JSON holds a high surrogate escape without its low surrogate", ErrUnstorable)
				}
				i += 6
			}
		}
	}
	return keys, nil
}

// uniqueKeys returns an ErrUnstorable error when an object of the JSON text raw (already
// parsed, so well formed) holds a key twice. The signature covers the raw bytes, but
// readers disagree on which copy counts: encoding/json (and so CEL) and jsonb keep the
// last, other parsers the first or both; jsonb would also store a document the provider
// did not sign. So "id" twice could dedupe on one value while a sink acts on another.
// Keys are compared as decoded, so "id" and "\u0069d" are the same key, as in jsonb.
// The check is a count: keys (storableJSON's) against the entries of parsed's objects,
// which a repeated key makes fewer; only then is the text read again, to name the key.
func uniqueKeys(raw []byte, keys int, parsed any) error {
	if entries(parsed) == keys {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if key, dup := duplicateKey(dec); dup {
		return fmt.Errorf("%w: the JSON holds the key %.64q twice in one object", ErrUnstorable, key)
	}
	return fmt.Errorf("%w: the JSON holds a key twice in one object", ErrUnstorable)
}

// entries counts the entries of every object in the decoded JSON value v.
func entries(v any) int {
	n := 0
	switch t := v.(type) {
	case map[string]any:
		n = len(t)
		for _, x := range t {
			n += entries(x)
		}
	case []any:
		for _, x := range t {
			n += entries(x)
		}
	}
	return n
}

// duplicateKey reads one value from dec and returns the first key that appears twice in
// one of its objects. Malformed JSON ends the search (the decoder has reported it).
func duplicateKey(dec *json.Decoder) (string, bool) {
	tok, err := dec.Token()
	if err != nil {
		return "", false
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			key, ok := k.(string)
			if err != nil || !ok {
				return "", false
			}
			if seen[key] {
				return key, true
			}
			seen[key] = true
			if key, dup := duplicateKey(dec); dup {
				return key, true
			}
		}
		_, _ = dec.Token() // the closing brace
	case json.Delim('['):
		for dec.More() {
			if key, dup := duplicateKey(dec); dup {
				return key, true
			}
		}
		_, _ = dec.Token() // the closing bracket
	}
	return "", false
}

// PostgreSQL's numeric (jsonb's number) holds at most 131072 digits before the decimal
// point and 16383 after it; a JSON number beyond either fails the transaction.
const (
	maxNumericWeight = 131072
	maxNumericScale  = 16383
)

// storableNumber reports whether the JSON number text n fits PostgreSQL's numeric.
// Malformed numbers are left to the decoder (true).
func storableNumber(n []byte) bool {
	if len(n) <= maxNumericScale && !bytes.ContainsAny(n, "eE") {
		return true // without an exponent, neither bound is reachable in fewer digits
	}
	s := strings.TrimPrefix(string(n), "-")
	mantissa, exp := s, int64(0)
	if k := strings.IndexAny(s, "eE"); k >= 0 {
		e, err := strconv.ParseInt(strings.TrimPrefix(s[k+1:], "+"), 10, 64)
		if err != nil {
			// An exponent past int64 is beyond numeric, unless it is malformed.
			return strings.Trim(s[k+1:], "+-0123456789") != "" || s[k+1:] == ""
		}
		mantissa, exp = s[:k], e
	}
	intPart, frac, _ := strings.Cut(mantissa, ".")
	if exp > 1<<40 || exp < -(1<<40) {
		return strings.Trim(mantissa, "0.") == "" && exp > 0
	}
	if int64(len(frac))-exp > maxNumericScale {
		return false
	}
	// The position of the leading significant digit relative to the point.
	var weight int64
	if t := strings.TrimLeft(intPart, "0"); t != "" {
		weight = int64(len(t)) + exp
	} else if t := strings.TrimLeft(frac, "0"); t != "" {
		weight = -int64(len(frac)-len(t)) + exp
	} else {
		return true // zero: only its scale matters
	}
	return weight <= maxNumericWeight
}

// firstYear is 0001-01-01T00:00:00Z in Unix seconds, the earliest occurredAt believed.
const firstYear = -62135596800

// hex4 decodes the four hex digits at raw[at:at+4].
func hex4(raw []byte, at int) (int, bool) {
	if at+4 > len(raw) {
		return 0, false
	}
	n := 0
	for _, c := range raw[at : at+4] {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		n = n<<4 | int(d)
	}
	return n, true
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
