package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/hookkeeper/hookkeeper/internal/dataplanecmd"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// forbidden are the packages (and their subpackages) the receiver binary must not
// link: the Kubernetes client and controller machinery, and the operator's own
// packages built on them. Each costs receiver pods resident memory for code they never
// run (about 30 MiB of RSS for the lot).
var forbidden = []string{
	"k8s.io/client-go",
	"sigs.k8s.io/controller-runtime",
	"github.com/hookkeeper/hookkeeper/controllers",
	"github.com/hookkeeper/hookkeeper/internal/devcluster",
	"github.com/hookkeeper/hookkeeper/internal/resources",
}

// TestLinksOnlyTheDataPlane fails if the binary links anything operator-side.
func TestLinksOnlyTheDataPlane(t *testing.T) {
	testsupport.ForbidDeps(t, "github.com/hookkeeper/hookkeeper/internal/receiver", forbidden)
}

// The binary has the data-plane subcommands and nothing else, and names itself in
// errors.
func TestSubcommands(t *testing.T) {
	root := newRootCmd()
	var names []string
	for _, c := range root.Commands() {
		names = append(names, c.Name())
	}
	for _, want := range []string{"receiver", "migrate", "version"} {
		if !slices.Contains(names, want) {
			t.Errorf("hookkeeper-receiver has no %s subcommand (has %v)", want, names)
		}
	}
	for _, not := range []string{"manager", "replay", "dev"} {
		if slices.Contains(names, not) {
			t.Errorf("hookkeeper-receiver has the operator-side subcommand %s", not)
		}
	}
	root.SetArgs([]string{"nope"})
	cmd, err := root.ExecuteC()
	if err == nil {
		t.Fatal("hookkeeper-receiver nope succeeded")
	}
	if got := dataplanecmd.ErrorMessage(cmd, err); !strings.HasPrefix(got, "hookkeeper-receiver: ") || !strings.HasSuffix(got, "see 'hookkeeper-receiver --help'") {
		t.Errorf("error message %q", got)
	}
}
