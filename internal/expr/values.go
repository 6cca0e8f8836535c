package expr

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

// DecodeJSON parses data for CEL: objects become map[string]any, arrays []any, integral
// numbers int64 (so `body.amount == 1000` and `event.amount == entity.amount` compare
// integers, as minor-unit amounts are), other numbers float64. Trailing data is an error.
func DecodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("parse JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("parse JSON: unexpected data after the top-level value")
	}
	return numbers(v), nil
}

func numbers(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			t[k] = numbers(x)
		}
		return t
	case []any:
		for i, x := range t {
			t[i] = numbers(x)
		}
		return t
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
		if f, err := t.Float64(); err == nil {
			return f
		}
		return t.String()
	default:
		return v
	}
}

// IsNull reports whether v is CEL null (or absent).
func IsNull(v ref.Val) bool {
	return v == nil || v.Type() == types.NullType
}

// AsString converts a string, or an integer (Shopify's numeric ids), to a string.
func AsString(v ref.Val) (string, error) {
	switch t := v.(type) {
	case types.String:
		return string(t), nil
	case types.Int:
		return strconv.FormatInt(int64(t), 10), nil
	case types.Uint:
		return strconv.FormatUint(uint64(t), 10), nil
	case types.Double:
		f := float64(t)
		if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return strconv.FormatInt(int64(f), 10), nil
		}
	}
	return "", fmt.Errorf("got %s, want a string", typeName(v))
}

// AsInt converts an integer, an integral double or a decimal string to int64.
func AsInt(v ref.Val) (int64, error) {
	switch t := v.(type) {
	case types.Int:
		return int64(t), nil
	case types.Uint:
		if uint64(t) > math.MaxInt64 {
			return 0, errors.New("integer out of range")
		}
		return int64(t), nil
	case types.Double:
		f := float64(t)
		if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return int64(f), nil
		}
		return 0, fmt.Errorf("%v is not a whole number of minor units", f)
	case types.String:
		i, err := strconv.ParseInt(strings.TrimSpace(string(t)), 10, 64)
		if err != nil {
			return 0, errors.New("string is not an integer")
		}
		return i, nil
	}
	return 0, fmt.Errorf("got %s, want an int", typeName(v))
}

// AsTime converts a CEL timestamp, Unix seconds (int or double, or a string of digits)
// or an RFC 3339 string to a time in UTC.
func AsTime(v ref.Val) (time.Time, error) {
	switch t := v.(type) {
	case types.Timestamp:
		return t.UTC(), nil
	case types.Int:
		return time.Unix(int64(t), 0).UTC(), nil
	case types.Uint:
		return time.Unix(int64(t), 0).UTC(), nil
	case types.Double:
		// Beyond ±2^53 seconds (285 million years) no time is meant, and converting a
		// larger double (or NaN) to int64 is undefined.
		if f := float64(t); math.IsNaN(f) || math.Abs(f) > 1<<53 {
			return time.Time{}, fmt.Errorf("%v is not a time in Unix seconds", f)
		}
		sec, frac := math.Modf(float64(t))
		return time.Unix(int64(sec), int64(frac*1e9)).UTC(), nil
	case types.String:
		s := strings.TrimSpace(string(t))
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return time.Unix(i, 0).UTC(), nil
		}
		ts, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return time.Time{}, errors.New("string is neither Unix seconds nor an RFC 3339 time")
		}
		return ts.UTC(), nil
	}
	return time.Time{}, fmt.Errorf("got %s, want a timestamp, Unix seconds or an RFC 3339 string", typeName(v))
}

// AsBool converts a CEL bool.
func AsBool(v ref.Val) (bool, error) {
	if b, ok := v.(types.Bool); ok {
		return bool(b), nil
	}
	return false, fmt.Errorf("got %s, want a bool", typeName(v))
}

func typeName(v ref.Val) string {
	if v == nil {
		return "nothing"
	}
	return v.Type().TypeName()
}
