package testsupport

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// ForbidDeps lists what the package in the test's directory links, as `go list -deps`
// does for its build, and fails the test for each dependency that is, or is below, one
// of forbidden. must is a package it must list, so that an empty listing cannot pass.
func ForbidDeps(tb testing.TB, must string, forbidden []string) {
	tb.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("go list -deps: %v\n%s", err, stderr.String())
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, must) {
		tb.Fatalf("go list -deps does not list %s; the check would see nothing:\n%s", must, out)
	}
	for _, dep := range deps {
		for _, f := range forbidden {
			if dep == f || strings.HasPrefix(dep, f+"/") {
				tb.Errorf("this binary links %s (find the importer with: go list -deps -f '{{.ImportPath}}: {{.Imports}}' . | grep %s)", dep, f)
			}
		}
	}
}
