// Package toolchain checks the modules under hack/tools that make builds beside hookkeeper.
//
// The Go build cache keys a compiled package by its source, its dependencies' versions and
// the compile flags. The Makefile gives every go command the same flags; this test keeps
// the versions the same, so a package the control plane (or helm, or controller-gen)
// shares with hookkeeper compiles once on a first `make dev` or `make test`.
package toolchain_test

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/mod/modfile"
)

// sharing lists the tool modules that must agree with the main module. golangci-lint and
// kustomize are left out: they pin older releases of shared modules that they are tested
// with, and neither is part of `make dev`.
var sharing = []string{"controlplane", "helm", "controller-gen"}

// versions reads the module versions a go.mod builds with: its requirements, with
// replacements that name a version applied.
func versions(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	f, err := modfile.Parse(path, data, nil)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	out := make(map[string]string, len(f.Require))
	for _, r := range f.Require {
		out[r.Mod.Path] = r.Mod.Version
	}
	for _, r := range f.Replace {
		if r.New.Version != "" {
			out[r.Old.Path] = r.New.Version
		}
	}
	return out
}

func TestToolModulesShareTheMainModulesVersions(t *testing.T) {
	root := filepath.Join("..", "..")
	main := versions(t, filepath.Join(root, "go.mod"))
	for _, tool := range sharing {
		t.Run(tool, func(t *testing.T) {
			own := versions(t, filepath.Join(root, "hack", "tools", tool, "go.mod"))
			shared := 0
			for path, want := range main {
				got, ok := own[path]
				if !ok {
					continue
				}
				shared++
				if got != want {
					t.Errorf("%s: hack/tools/%s/go.mod has %s, go.mod has %s: align them (go get %s@<the higher one> in both), or each compiles separately on a first build",
						path, tool, got, want, path)
				}
			}
			// A tool that shares nothing would make this test pass vacuously.
			if shared < 10 {
				t.Fatalf("hack/tools/%s/go.mod shares %d modules with go.mod; expected the Kubernetes and Go libraries both use", tool, shared)
			}
		})
	}
}
