package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const repoRoot = "../.."

func loadRepoCRDs(t *testing.T) []CRD {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "config", "crd", "bases", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in config/crd/bases (err %v)", err)
	}
	crds := make([]CRD, 0, len(files))
	for _, f := range files {
		crd, err := readCRD(f)
		if err != nil {
			t.Fatal(err)
		}
		crds = append(crds, crd)
	}
	return crds
}

func render(t *testing.T, crds []CRD) string {
	t.Helper()
	var buf bytes.Buffer
	if err := Render(&buf, crds); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// The committed reference must be what the generator makes of the committed CRDs.
func TestCommittedReferenceIsCurrent(t *testing.T) {
	want := render(t, loadRepoCRDs(t))
	got, err := os.ReadFile(filepath.Join(repoRoot, "docs", "api-reference.md"))
	if err != nil {
		t.Fatalf("read docs/api-reference.md: %v", err)
	}
	if string(got) != want {
		t.Fatal("docs/api-reference.md is out of date: run `go run ./hack/gen-api-docs -out docs/api-reference.md`")
	}
}

// Every field of every CRD's schema appears in the section of its parent, under that
// CRD's heading, with its description.
func TestEveryFieldIsDocumented(t *testing.T) {
	crds := loadRepoCRDs(t)
	kinds := splitKinds(render(t, crds))
	checked := 0
	for _, crd := range crds {
		kind := crd.Spec.Names.Kind
		sections := splitSections(kinds[kind])
		var walk func(path string, s *Schema)
		walk = func(path string, s *Schema) {
			child, childPath := objectOf(s, path)
			if child == nil {
				return
			}
			title := childPath
			if title == "" {
				title = kind
			}
			body, ok := sections[title]
			if !ok {
				t.Errorf("%s: no section for %s", kind, title)
				return
			}
			for name, f := range child.Properties {
				row := "| `" + name + "` |"
				if !strings.Contains(body, row) {
					t.Errorf("%s: section %s has no row for %s", kind, title, name)
				}
				if f.Description != "" && !strings.Contains(body, escapeCell(f.Description)) {
					t.Errorf("%s: section %s lacks the description of %s", kind, title, name)
				}
				checked++
				walk(childPath+"."+name, f)
			}
		}
		for _, v := range crd.Spec.Versions {
			walk("", v.Schema.OpenAPIV3Schema)
		}
	}
	if checked < 50 {
		t.Fatalf("checked only %d fields; the walk is not reaching the schema", checked)
	}
}

// splitKinds cuts the reference into one part per "## Kind" heading.
func splitKinds(doc string) map[string]string {
	out := map[string]string{}
	parts := strings.Split(doc, "\n## ")
	for _, p := range parts[1:] {
		kind, _, _ := strings.Cut(p, "\n")
		out[kind] = "\n" + p
	}
	return out
}

func splitSections(doc string) map[string]string {
	out := map[string]string{}
	parts := strings.Split(doc, "\n### `")
	for _, p := range parts[1:] {
		end := strings.Index(p, "`")
		out[p[:end]] = p[end:]
	}
	return out
}

func TestGroupRulesFoldsUnrolledIndexes(t *testing.T) {
	rules := []Validation{
		{Rule: "self.a in self.b"},
		{Rule: "size(self.t) <= 0 || self.t[0].to in self.s", MessageExpression: "self.t[0].name"},
		{Rule: "size(self.t) <= 1 || self.t[1].to in self.s", MessageExpression: "self.t[1].name"},
		{Rule: "size(self.t) <= 2 || self.t[2].to in self.s", MessageExpression: "self.t[2].name"},
		{Rule: "self.x[3] == self.y[4]"},
	}
	groups := groupRules(rules)
	if len(groups) != 3 {
		t.Fatalf("got %d groups, want 3: %+v", len(groups), groups)
	}
	g := groups[1]
	if g.count != 3 || g.first != 0 || g.last != 2 {
		t.Errorf("unrolled family: count %d, first %d, last %d; want 3, 0, 2", g.count, g.first, g.last)
	}
	if g.rule.Rule != "size(self.t) <= i || self.t[i].to in self.s" || g.rule.MessageExpression != "self.t[i].name" {
		t.Errorf("generalized rule = %q / %q", g.rule.Rule, g.rule.MessageExpression)
	}
	if groups[2].rule.Rule != "self.x[3] == self.y[4]" {
		t.Errorf("a rule with two different indexes must stay as written, got %q", groups[2].rule.Rule)
	}
}

func TestEscaping(t *testing.T) {
	cases := map[string]string{
		"a <cluster>-app Secret": "a &lt;cluster&gt;-app Secret",
		"keep `a<b` in code":     "keep `a<b` in code",
		"x || y\nnext line":      `x \|\| y next line`,
	}
	for in, want := range cases {
		if got := escapeCell(in); got != want {
			t.Errorf("escapeCell(%q) = %q, want %q", in, got, want)
		}
	}
	if got := anchor(".spec.signingSecrets[].secretKeyRef"); got != "specsigningsecretssecretkeyref" {
		t.Errorf("anchor = %q", got)
	}
}
