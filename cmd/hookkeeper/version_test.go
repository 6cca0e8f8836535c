package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestVersionCommand(t *testing.T) {
	var out bytes.Buffer
	rootCmd.SetOut(&out)
	rootCmd.SetArgs([]string{"version"})
	t.Cleanup(func() { rootCmd.SetArgs(nil); rootCmd.SetOut(nil) })
	if err := rootCmd.Execute(); err != nil {
		t.Fatalf("hookkeeper version: %v", err)
	}
	if got := out.String(); !strings.HasPrefix(got, "hookkeeper ") || !strings.Contains(got, "revision ") || !strings.Contains(got, "go1.") {
		t.Fatalf("hookkeeper version printed %q", got)
	}
}
