package devcluster

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The node agent runs a container's command from the local binary it maps to: the
// image's entrypoint (or no command) from Executable, /hookkeeper-receiver from the
// hookkeeper-receiver beside it when `make build` put one there, else from Executable,
// which has the same data-plane subcommands.
func TestCommandsMapToLocalBinaries(t *testing.T) {
	dir := t.TempDir()
	full := filepath.Join(dir, "hookkeeper")
	if err := os.WriteFile(full, []byte("#!/bin/sh\n"), 0o755); err != nil { //nolint:gosec // an executable on purpose
		t.Fatal(err)
	}
	if got := DefaultExecutables(full); got[ImageEntrypoint] != full || got[ImageReceiver] != full {
		t.Errorf("without bin/hookkeeper-receiver: %v, want both commands on %s", got, full)
	}
	receiver := filepath.Join(dir, "hookkeeper-receiver")
	if err := os.WriteFile(receiver, []byte("#!/bin/sh\n"), 0o755); err != nil { //nolint:gosec // an executable on purpose
		t.Fatal(err)
	}
	exes := DefaultExecutables(full)
	if exes[ImageEntrypoint] != full || exes[ImageReceiver] != receiver {
		t.Errorf("with bin/hookkeeper-receiver: %v, want %s on %s", exes, ImageReceiver, receiver)
	}

	a := &NodeAgent{opts: NodeAgentOptions{Executable: full, Executables: exes}}
	for name, tc := range map[string]struct {
		command    []string
		wantExe    string
		wantPrefix []string
		wantErr    string
	}{
		"image entrypoint":     {nil, full, nil, ""},
		"explicit /hookkeeper": {[]string{"/hookkeeper"}, full, []string{}, ""},
		"receiver binary":      {[]string{"/hookkeeper-receiver"}, receiver, []string{}, ""},
		"command with args":    {[]string{"/hookkeeper-receiver", "migrate"}, receiver, []string{"migrate"}, ""},
		"unknown command":      {[]string{"/bin/sh", "-c", "true"}, "", nil, `no local binary for command "/bin/sh"`},
	} {
		exe, prefix, err := a.commandFor(&corev1.Container{Name: "c", Command: tc.command})
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v, want one containing %q", name, err, tc.wantErr)
			}
			continue
		}
		if err != nil || exe != tc.wantExe || !slices.Equal(prefix, tc.wantPrefix) {
			t.Errorf("%s: %s %v (%v), want %s %v", name, exe, prefix, err, tc.wantExe, tc.wantPrefix)
		}
	}
}
