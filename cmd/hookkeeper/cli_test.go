package main

import (
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/hookkeeper/hookkeeper/internal/dataplanecmd"
)

// A failed command says where its usage is.
func TestErrorsPointAtTheUsage(t *testing.T) {
	cases := map[string]struct {
		args []string
		want string
	}{
		"unknown flag":    {[]string{"replay", "--bogus"}, "see 'hookkeeper replay --help'"},
		"unknown command": {[]string{"nope"}, "see 'hookkeeper --help'"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rootCmd.SetArgs(tc.args)
			t.Cleanup(func() { rootCmd.SetArgs(nil) })
			cmd, err := rootCmd.ExecuteC()
			if err == nil {
				t.Fatalf("hookkeeper %v succeeded", tc.args)
			}
			if got := dataplanecmd.ErrorMessage(cmd, err); !strings.HasPrefix(got, "hookkeeper: ") || !strings.HasSuffix(got, tc.want) {
				t.Fatalf("error message %q, want it to end with %q", got, tc.want)
			}
		})
	}
}

var flagName = regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`)

// One flag vocabulary: the manager and the receiver both take --log-level, and no flag's
// help has backquotes (pflag would show the quoted words as the flag's value name).
func TestFlagVocabulary(t *testing.T) {
	for _, name := range []string{"manager", "receiver"} {
		cmd, _, err := rootCmd.Find([]string{name})
		if err != nil {
			t.Fatal(err)
		}
		if cmd.Flags().Lookup("log-level") == nil {
			t.Errorf("hookkeeper %s has no --log-level", name)
		}
	}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, m := range flagName.FindAllStringSubmatch(c.Flags().FlagUsages(), -1) {
			if f := c.Flags().Lookup(m[1]); f != nil && strings.Contains(f.Usage, "`") {
				t.Errorf("%s --%s: backquotes in the usage become the value name: %q", c.CommandPath(), f.Name, f.Usage)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(rootCmd)
}

// A malformed --monitoring-labels stops the manager before it talks to any cluster,
// naming the flag.
func TestManagerRejectsBadMonitoringLabels(t *testing.T) {
	for _, bad := range []string{"release", "app.kubernetes.io/name=x", "bad key=v"} {
		cmd := newManagerCmd()
		cmd.SetArgs([]string{"--receiver-image=hookkeeper:test", "--monitoring-labels=" + bad})
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), "--monitoring-labels") {
			t.Errorf("--monitoring-labels=%s: %v", bad, err)
		}
	}
}
