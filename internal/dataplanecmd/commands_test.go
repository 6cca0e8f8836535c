package dataplanecmd

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
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

// TestGroupCommitPredictFlag: --group-commit-predict=false turns predicted groups off
// (receipt.GroupCommit.NoPrediction); the flag's default keeps them on.
func TestGroupCommitPredictFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool // NoPrediction
	}{
		{nil, false}, // on by default
		{[]string{"--group-commit-predict=false"}, true},
		{[]string{"--group-commit-predict=true"}, false},
	} {
		cmd := Receiver()
		if err := cmd.ParseFlags(tc.args); err != nil {
			t.Fatal(err)
		}
		predict, err := cmd.Flags().GetBool("group-commit-predict")
		if err != nil {
			t.Fatal(err)
		}
		g, err := receiverFlags{groupPredict: predict}.groupCommit()
		if err != nil {
			t.Fatal(err)
		}
		if g.NoPrediction != tc.want {
			t.Errorf("%v: NoPrediction %v, want %v", tc.args, g.NoPrediction, tc.want)
		}
	}
}

// TestCommandsWriteTerminationMessage: a migration or a receiver that cannot reach its
// database leaves why in the termination-message file, one line, without the password
// or the URL, where the pod's terminated state shows it.
func TestCommandsWriteTerminationMessage(t *testing.T) {
	manifest := testsupport.StripeEndpointFile(t, "http://127.0.0.1:9/")
	const password = "s3cret-Pw-4711"
	dbURL := "postgres://hk:" + password + "@" + testsupport.FreeAddr(t) + "/app?sslmode=disable&connect_timeout=5"
	migrate := func() *cobra.Command { return Migrate() }
	receiver := func() *cobra.Command { return Receiver() }
	for name, tc := range map[string]struct {
		command   func() *cobra.Command
		url, want string
		flag      bool
	}{
		"migrate, closed port, path from the environment":  {migrate, dbURL, "connect to the database: ", false},
		"migrate, closed port, path from the flag":         {migrate, dbURL, "connection refused", true},
		"migrate, no database URL":                         {migrate, "", config.EnvDatabaseURL + " is not set", false},
		"receiver, closed port, path from the environment": {receiver, dbURL, "open database: ", false},
		"receiver, no database URL":                        {receiver, "", config.EnvDatabaseURL + " is not set", true},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "termination-log")
			t.Setenv(config.EnvDatabaseURL, tc.url)
			t.Setenv(config.EnvSigningSecretPrefix+"0", "whsec_termination_test")
			args := []string{"--endpoint", manifest}
			if tc.flag {
				t.Setenv(EnvTerminationMessagePath, "")
				args = append(args, "--termination-message-path", path)
			} else {
				t.Setenv(EnvTerminationMessagePath, path)
			}
			cmd := tc.command()
			cmd.SetArgs(args)
			cmd.SetOut(new(strings.Builder))
			cmd.SetErr(new(strings.Builder))
			err := cmd.Execute()
			if err == nil {
				t.Fatalf("%s succeeded without a database", cmd.Name())
			}
			b, readErr := os.ReadFile(path)
			if readErr != nil {
				t.Fatalf("no termination message: %v", readErr)
			}
			msg := string(b)
			t.Logf("termination message: %s", msg)
			if !strings.Contains(msg, tc.want) || strings.ContainsAny(msg, "\r\n") {
				t.Errorf("termination message %q: want one line with %q (error: %v)", msg, tc.want, err)
			}
			if strings.Contains(msg, password) || strings.Contains(msg, "hk:") {
				t.Errorf("termination message %q carries the credentials", msg)
			}
		})
	}
}

func TestRedact(t *testing.T) {
	const u = "postgres://app:hunter22@db.example:5432/app?sslmode=require"
	for in, want := range map[string]string{
		"parse " + u + ": bad":                              "parse $DATABASE_URL: bad",
		"dial postgres://other:pw@h/x failed":               "dial postgres://xxxxx@h/x failed",
		"auth failed for password hunter22":                 "auth failed for password xxxxx",
		"conn host=h password=topsecret user=a":             "conn host=h password=xxxxx user=a",
		"conn host=h password='top secret' user=a":          "conn host=h password=xxxxx user=a",
		"dial tcp 127.0.0.1:1: connect: connection refused": "dial tcp 127.0.0.1:1: connect: connection refused",
	} {
		if got := redact(in, u); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
	if got := terminationMessage(fmt.Errorf("a\nb\t c"), ""); got != "a b c" {
		t.Errorf("terminationMessage = %q, want one line", got)
	}
}
