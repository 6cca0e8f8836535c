package devcluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestTerminationMessage: the agent reports an exited process's termination message as
// the kubelet does: the file it wrote, else the tail of its log when the container
// asks for FallbackToLogsOnError and failed.
func TestTerminationMessage(t *testing.T) {
	dir := t.TempDir()
	msgPath, logPath := filepath.Join(dir, "c.log.termination-log"), filepath.Join(dir, "c.log")
	var log strings.Builder
	for range 100 {
		log.WriteString("noise\n")
	}
	log.WriteString("connect to the database: connection refused\n")
	if err := os.WriteFile(logPath, []byte(log.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	fallback := &corev1.Container{TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError}
	file := &corev1.Container{TerminationMessagePolicy: corev1.TerminationMessageReadFile}

	got := terminationMessage(fallback, msgPath, logPath, 1)
	if !strings.HasSuffix(got, "noise\nconnect to the database: connection refused") || strings.Count(got, "\n") != 79 {
		t.Errorf("fallback to the log's last 80 lines: %q", got)
	}
	if got := terminationMessage(file, msgPath, logPath, 1); got != "" {
		t.Errorf("File policy, no file: %q", got)
	}
	if got := terminationMessage(fallback, msgPath, logPath, 0); got != "" {
		t.Errorf("success falls back to nothing: %q", got)
	}
	if err := os.WriteFile(msgPath, []byte("migrate schema: boom"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*corev1.Container{fallback, file} {
		if got := terminationMessage(c, msgPath, logPath, 1); got != "migrate schema: boom" {
			t.Errorf("%s: %q, want the file's message", c.TerminationMessagePolicy, got)
		}
	}
}
