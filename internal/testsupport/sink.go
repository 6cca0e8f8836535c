package testsupport

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// AcceptingSink starts a sink that reads every delivery to the end and answers 204, as
// a healthy endpoint's sink does (an unreachable one keeps the dispatchers retrying),
// and returns its URL; it closes when tb ends.
func AcceptingSink(tb testing.TB) string {
	tb.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	tb.Cleanup(s.Close)
	return s.URL
}
