package receiver

import (
	"log"
	"strings"

	"github.com/go-logr/logr"
)

// newStdLogger routes net/http's own messages (accept errors, malformed requests)
// into the structured log.
func newStdLogger(l logr.Logger) *log.Logger {
	return log.New(logWriter{l}, "", 0)
}

type logWriter struct{ log logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.Info(strings.TrimSpace(string(p)))
	return len(p), nil
}
