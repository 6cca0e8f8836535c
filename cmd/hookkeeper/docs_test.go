package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/hookkeeper/hookkeeper/internal/store"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// A shell line of the docs: where it is and what it says (continuations joined).
type docCommand struct {
	where string
	line  string
	// marked is the block's "# needs ..." line, empty when the block has none.
	marked string
}

var (
	fence       = regexp.MustCompile("^\\s*```(sh|bash|console|shell)\\s*$")
	needsMarker = regexp.MustCompile(`^\s*# needs \S`)
	// Tools whose commands act on something outside the repository.
	outside   = regexp.MustCompile(`(^|[\s;(|&]|\$\()(kubectl|helm|psql|crane|skopeo|curl)\s`)
	makeCall  = regexp.MustCompile(`(?:^|[\s;&|(])make\s+([a-z][a-z0-9-]*(?:\s+[a-z][a-z0-9-]*)*)`)
	repoPath  = regexp.MustCompile(`(?:^|[\s=("'])((?:config|docs|test|hack|charts|cmd|internal|api)/[A-Za-z0-9_./-]*[A-Za-z0-9_])`)
	hkCall    = regexp.MustCompile(`(?:^|--\s+|&&\s*|;\s*|\|\s*|\$\()(?:\./)?(?:bin/|/)?hookkeeper\s+(.*)$`)
	sampleCmd = regexp.MustCompile(`^#\s+((?:kubectl|hookkeeper|make|helm)\s.*)$`)
)

// docCommands reads the shell blocks of README.md and docs/, and the commands in the
// samples' comments.
func docCommands(t *testing.T, root string) []docCommand {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(root, "README.md"))
	var out []docCommand
	for _, path := range files {
		rel, _ := filepath.Rel(root, path)
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		var (
			in      bool
			block   []docCommand
			marked  string
			pending string
			n       int
		)
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			n++
			line := sc.Text()
			switch {
			case !in && fence.MatchString(line):
				in, block, marked, pending = true, nil, "", ""
			case in && strings.HasPrefix(strings.TrimSpace(line), "```"):
				for i := range block {
					block[i].marked = marked
				}
				out = append(out, block...)
				in = false
			case in:
				if needsMarker.MatchString(line) {
					marked = strings.TrimSpace(line)
					continue
				}
				if cont, ok := strings.CutSuffix(line, "\\"); ok {
					pending += cont + " "
					continue
				}
				line = pending + line
				pending = ""
				if s := strings.TrimSpace(line); s != "" && !strings.HasPrefix(s, "#") {
					block = append(block, docCommand{where: rel + ":" + itoa(n), line: s})
				}
			}
		}
		_ = f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	samples, err := filepath.Glob(filepath.Join(root, "config", "samples", "*", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	top, _ := filepath.Glob(filepath.Join(root, "config", "samples", "*.yaml"))
	for _, path := range append(top, samples...) {
		rel, _ := filepath.Rel(root, path)
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(raw), "\n") {
			if m := sampleCmd.FindStringSubmatch(line); m != nil {
				// A command in a sample's comment is always applied to a cluster.
				out = append(out, docCommand{where: rel + ":" + itoa(i+1), line: m[1], marked: "# needs a Kubernetes cluster"})
			}
		}
	}
	return out
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestDocsCommands keeps the docs' commands true. Every make target, every hookkeeper
// subcommand and flag, and every repository path a command names must exist; a block
// with a command that acts on something outside the repository (kubectl, helm, psql, a
// registry) must say what it needs in a "# needs ..." line, because no test here runs
// it against a real cluster.
func TestDocsCommands(t *testing.T) {
	root := testsupport.RepoRoot(t)
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	commands := docCommands(t, root)
	if len(commands) < 40 {
		t.Fatalf("found %d commands in the docs; the reader is broken", len(commands))
	}
	for _, p := range checkDocCommands(root, string(makefile), commands) {
		t.Error(p)
	}
}

// The docs name migration Jobs as the operator does: <endpoint>-migrate-v<schema
// version>, the newest migration this binary embeds. A migration added without the
// docs following fails here.
func TestDocsNameTheSchemaVersion(t *testing.T) {
	root := testsupport.RepoRoot(t)
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile(`-migrate-v(\d+)|schema "[a-z]+", version (\d+)`)
	found := 0
	for _, f := range append(files, filepath.Join(root, "README.md")) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range named.FindAllStringSubmatch(string(b), -1) {
			found++
			if v := m[1] + m[2]; v != strconv.FormatInt(store.SchemaVersion, 10) {
				t.Errorf("%s: %q names schema version %s, the binary's is %d", filepath.Base(f), m[0], v, store.SchemaVersion)
			}
		}
	}
	if found == 0 {
		t.Fatal("no migration Job named in the docs; the pattern is broken")
	}
}

// The checker catches the drift it exists for: a misspelt flag, a removed target, an
// unmarked cluster command, a moved sample, a renamed subcommand.
func TestDocsCommandsCatchDrift(t *testing.T) {
	root := testsupport.RepoRoot(t)
	bad := []docCommand{
		{where: "a", line: "hookkeeper replay --dead-letter"},
		{where: "b", line: "make no-such-target"},
		{where: "c", line: "kubectl -n shop get pods"},
		{where: "d", line: "cat config/samples/no-such-sample.yaml"},
		{where: "e", line: "bin/hookkeeper no-such-command"},
	}
	problems := checkDocCommands(root, "test:\n", bad)
	for _, want := range []string{"a: hookkeeper replay has no flag --dead-letter", "b: make no-such-target", "c: ", "d: config/samples/no-such-sample.yaml", "e: hookkeeper no-such-command"} {
		found := false
		for _, p := range problems {
			found = found || strings.HasPrefix(p, want)
		}
		if !found {
			t.Errorf("no problem starting %q in %q", want, problems)
		}
	}
	good := []docCommand{{where: "f", line: "hookkeeper replay --receipts --dry-run"}, {where: "g", line: "make test"}}
	if problems := checkDocCommands(root, "test:\n", good); len(problems) > 0 {
		t.Errorf("good commands: %q", problems)
	}
}

// checkDocCommands returns one problem per command that names something missing, or
// acts outside the repository without saying what it needs.
func checkDocCommands(root, makefile string, commands []docCommand) []string {
	var problems []string
	for _, c := range commands {
		if outside.MatchString(c.line) && c.marked == "" {
			problems = append(problems, fmt.Sprintf("%s: %q acts on a cluster or registry; mark its block with a \"# needs ...\" line", c.where, c.line))
		}
		for _, m := range makeCall.FindAllStringSubmatch(c.line, -1) {
			for _, target := range strings.Fields(m[1]) {
				if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(target) + `:`).MatchString(makefile) {
					problems = append(problems, fmt.Sprintf("%s: make %s: no such target", c.where, target))
				}
			}
		}
		for _, m := range repoPath.FindAllStringSubmatch(c.line, -1) {
			if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
				problems = append(problems, fmt.Sprintf("%s: %s does not exist", c.where, m[1]))
			}
		}
		if m := hkCall.FindStringSubmatch(c.line); m != nil {
			problems = append(problems, checkHookkeeperArgs(c.where, m[1])...)
		}
	}
	return problems
}

// checkHookkeeperArgs finds the subcommand and checks each of its flags exists.
func checkHookkeeperArgs(where, rest string) []string {
	for _, stop := range []string{" | ", " && ", " > ", " 2>", ";", " || "} {
		if i := strings.Index(rest, stop); i >= 0 {
			rest = rest[:i]
		}
	}
	args := strings.Fields(rest)
	cmd, remaining, err := rootCmd.Find(args)
	if err != nil || cmd == rootCmd && len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return []string{fmt.Sprintf("%s: hookkeeper %s: no such command", where, rest)}
	}
	var problems []string
	for _, a := range remaining {
		name, ok := strings.CutPrefix(a, "--")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, "=")
		if flagOf(cmd, name) == nil {
			problems = append(problems, fmt.Sprintf("%s: %s has no flag --%s", where, cmd.CommandPath(), name))
		}
	}
	return problems
}

func flagOf(cmd *cobra.Command, name string) any {
	if name == "help" {
		return true
	}
	if f := cmd.Flags().Lookup(name); f != nil {
		return f
	}
	if f := cmd.InheritedFlags().Lookup(name); f != nil {
		return f
	}
	return nil
}
