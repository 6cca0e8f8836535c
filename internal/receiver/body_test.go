package receiver

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// A body takes at most about maxBodyBytes of memory, with or without a Content-Length:
// bytes.Buffer.ReadFrom alone doubles as bytes arrive, so a body just under a 1 MiB
// limit held a 2 MiB buffer, and maxInFlight of them twice the memory the docs bound.
func TestReadBodyHoldsAtMostTheLimit(t *testing.T) {
	const limit = 1 << 20
	body := bytes.Repeat([]byte("x"), limit-100)
	for name, contentLength := range map[string]int64{"with Content-Length": int64(len(body)), "chunked": -1} {
		t.Run(name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/hooks", io.NopCloser(bytes.NewReader(body)))
			r.ContentLength = contentLength
			buf, err := readBody(httptest.NewRecorder(), r, limit)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), body) {
				t.Fatalf("read %d bytes, want the %d sent", buf.Len(), len(body))
			}
			// The allocator rounds up to its size classes (pages, for a body this large).
			if c := buf.Cap(); c > limit+16<<10 {
				t.Errorf("buffer capacity %d for a %d-byte body under a %d limit", c, len(body), limit)
			}
		})
	}
	t.Run("over the limit, chunked", func(t *testing.T) {
		r := httptest.NewRequest(http.MethodPost, "/hooks", io.NopCloser(bytes.NewReader(append(body, make([]byte, 200)...))))
		r.ContentLength = -1
		var tooLarge *http.MaxBytesError
		if _, err := readBody(httptest.NewRecorder(), r, limit); !errors.As(err, &tooLarge) {
			t.Errorf("err = %v, want the body refused as too large", err)
		}
	})
}
