package receiver

import (
	"log"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookkeeper/hookkeeper/internal/metrics"
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

// DefaultRejectionLogInterval is how often a rejection reason is logged at most after
// its first line.
const DefaultRejectionLogInterval = time.Second

// rejectionLog rate-limits the log lines of rejected requests, which anyone on the
// public URL can cause at will: the first rejection of each reason is logged, then at
// most one per interval per reason, carrying in "suppressed" how many of that reason
// were left out since the previous line. The metrics still count every request.
type rejectionLog struct {
	log      logr.Logger
	endpoint string
	interval time.Duration
	now      func() time.Time

	mu      sync.Mutex
	reasons map[string]*reasonLog
}

type reasonLog struct {
	last       time.Time
	suppressed int
	// dropped is the suppressed-lines counter of this reason, resolved once.
	dropped prometheus.Counter
}

func newRejectionLog(log logr.Logger, endpoint string, interval time.Duration) *rejectionLog {
	if interval <= 0 {
		interval = DefaultRejectionLogInterval
	}
	return &rejectionLog{log: log, endpoint: endpoint, interval: interval, now: time.Now, reasons: map[string]*reasonLog{}}
}

// Info logs msg with keysAndValues unless a line of reason was logged less than the
// interval ago. reason is one of a small fixed set (never request data), so the map
// stays small.
func (l *rejectionLog) Info(reason, msg string, keysAndValues ...any) {
	if !l.log.Enabled() {
		return
	}
	now := l.now()
	l.mu.Lock()
	st := l.reasons[reason]
	if st == nil {
		st = &reasonLog{dropped: metrics.RejectionLogsSuppressed.WithLabelValues(l.endpoint, reason)}
		l.reasons[reason] = st
	} else if now.Sub(st.last) < l.interval {
		st.suppressed++
		l.mu.Unlock()
		st.dropped.Inc()
		return
	}
	suppressed := st.suppressed
	st.last, st.suppressed = now, 0
	l.mu.Unlock()
	if suppressed > 0 {
		keysAndValues = append(keysAndValues, "suppressed", suppressed)
	}
	l.log.Info(msg, keysAndValues...)
}
