package signature

import (
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// SingleHeader returns the value of a header that must appear exactly once and be
// non-empty. Two values are ambiguous (which one was signed?), so they are malformed.
func SingleHeader(h http.Header, name string) (string, *Error) {
	values := h.Values(name)
	switch {
	case len(values) == 0 || (len(values) == 1 && strings.TrimSpace(values[0]) == ""):
		return "", Fail(ReasonMissingHeader, "header %s is missing or empty", http.CanonicalHeaderKey(name))
	case len(values) > 1:
		return "", Fail(ReasonMalformedHeader, "header %s appears %d times", http.CanonicalHeaderKey(name), len(values))
	}
	return strings.TrimSpace(values[0]), nil
}

// Present reports whether a header has a non-empty value.
func Present(h http.Header, name string) bool {
	for _, v := range h.Values(name) {
		if strings.TrimSpace(v) != "" {
			return true
		}
	}
	return false
}

// digits parses decimal digits only (no sign, no spaces), so the text that was signed
// and the number that is checked cannot disagree.
func digits(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// ParseTimestamp reads a signed timestamp written in format.
func ParseTimestamp(format v1alpha1.TimestampFormat, s string) (time.Time, bool) {
	switch format {
	case v1alpha1.TimestampUnixMilli:
		n, ok := digits(s)
		return time.UnixMilli(n), ok
	case v1alpha1.TimestampRFC3339:
		t, err := time.Parse(time.RFC3339Nano, s)
		return t, err == nil
	default:
		n, ok := digits(s)
		return time.Unix(n, 0), ok
	}
}

// CheckTimestamp parses a signed timestamp and checks it is within tolerance of now in
// either direction (a future timestamp is as suspect as an old one). It returns the
// time in Unix seconds, the form of signed.timestamp whatever the wire format.
func CheckTimestamp(name string, format v1alpha1.TimestampFormat, value string, now time.Time, tolerance time.Duration) (string, *Error) {
	ts, ok := ParseTimestamp(format, value)
	if !ok {
		return "", Fail(ReasonMalformedHeader, "%s is not a timestamp of the form %s", name, timestampForm(format))
	}
	// Compare without negating a Duration: now.Sub saturates at the Duration bounds, and
	// negating the minimum Duration would overflow into a small value and pass.
	diff := now.Sub(ts)
	if diff > tolerance || diff < -tolerance {
		return "", Fail(ReasonTimestampOutOfTolerance, "%s is outside the %s tolerance", name, tolerance)
	}
	return strconv.FormatInt(ts.Unix(), 10), nil
}

func timestampForm(format v1alpha1.TimestampFormat) string {
	switch format {
	case v1alpha1.TimestampUnixMilli:
		return "Unix milliseconds"
	case v1alpha1.TimestampRFC3339:
		return "RFC 3339"
	}
	return "Unix seconds"
}

// DecodeSignature decodes one signature and checks its length. Only the alphabet of the
// encoding is accepted (the base64 decoder would otherwise skip embedded newlines) and
// base64 is decoded strictly, so every signature has exactly one accepted base64 text,
// and hex only its two letter cases.
func DecodeSignature(encoding v1alpha1.SignatureEncoding, s string, size int) ([]byte, bool) {
	if s == "" {
		return nil, false
	}
	var (
		decoded []byte
		err     error
	)
	if encoding == v1alpha1.EncodingBase64 {
		for i := 0; i < len(s); i++ {
			c := s[i]
			if !isLetter(c) && !isDigit(c) && c != '+' && c != '/' && c != '=' {
				return nil, false
			}
		}
		decoded, err = base64.StdEncoding.Strict().DecodeString(s)
	} else {
		decoded, err = hex.DecodeString(s)
	}
	if err != nil || len(decoded) != size {
		return nil, false
	}
	return decoded, true
}

// ValidHeaderName reports whether name is an HTTP header field name (an RFC 9110 token).
func ValidHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !isLetter(c) && !isDigit(c) && strings.IndexByte("!#$%&'*+-.^_`|~", c) < 0 {
			return false
		}
	}
	return true
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
