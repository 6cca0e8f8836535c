package dataplanecmd

import (
	"bytes"
	"strings"
	"testing"
)

func TestVersionCommand(t *testing.T) {
	var out bytes.Buffer
	cmd := Version()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("version: %v", err)
	}
	if got := out.String(); !strings.HasPrefix(got, "hookkeeper ") || !strings.Contains(got, "revision ") || !strings.Contains(got, "go1.") {
		t.Fatalf("version printed %q", got)
	}
}
