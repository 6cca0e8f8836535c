package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
)

// Strict JSON reading for the verifiers that parse a body themselves (Adyen, Mailgun,
// Linear, HubSpot): one value, no trailing data, no duplicate keys, so that the value a
// verifier checked is the one every later reader of the body sees.

var errNotObject = errors.New("not a JSON object")

// decodeObject decodes one JSON object into its members. It rejects trailing data and
// duplicate keys, with foldCase also keys that differ only in case: Go's encoding/json
// matches struct fields ignoring case and keeps the last match, so "NotificationItems"
// next to "notificationItems" would let a struct decoder elsewhere act on items this
// package never verified.
func decodeObject(raw []byte, foldCase bool) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errNotObject
	}
	members := map[string]json.RawMessage{}
	folded := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, errNotObject
		}
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, err
		}
		if _, dup := members[key]; dup {
			return nil, errors.New("duplicate object key")
		}
		if foldCase {
			fold := foldKey(key)
			if folded[fold] {
				return nil, errors.New("duplicate object key (keys are compared ignoring case)")
			}
			folded[fold] = true
		}
		members[key] = value
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, err
	}
	if !atEnd(dec) {
		return nil, errors.New("data after the JSON object")
	}
	return members, nil
}

// foldKey maps keys that Go's case-insensitive field matching would confuse to one value
// (upper then lower also folds the long s and the Kelvin sign).
func foldKey(key string) string { return strings.ToLower(strings.ToUpper(key)) }

func isNull(raw json.RawMessage) bool {
	return raw == nil || string(bytes.TrimSpace(raw)) == "null"
}

// stringField reads a member that must be a JSON string when present; absent or null is
// the empty string, as in Adyen's own libraries and Mailgun's Go SDK (which decodes the
// timestamp into a string too).
func stringField(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", errors.New("expected a string")
	}
	return s, nil
}

// atEnd reports whether dec has read all of its input: only white space follows.
func atEnd(dec *json.Decoder) bool {
	_, err := dec.Token()
	return errors.Is(err, io.EOF)
}
