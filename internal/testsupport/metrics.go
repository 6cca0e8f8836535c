package testsupport

import (
	"fmt"
	"io"
	"net/http"
)

// Metrics returns the Prometheus text an admin port serves at /metrics; adminURL is
// the port's base URL ("http://host:port"). It returns the error rather than failing
// the test, since some callers poll a process that may be gone or not yet listening.
func Metrics(adminURL string) (string, error) {
	resp, err := http.Get(adminURL + "/metrics")
	if err != nil {
		return "", fmt.Errorf("GET /metrics: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("read /metrics: %w", err)
	}
	return string(b), nil
}
