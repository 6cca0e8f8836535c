package dataplanecmd

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// TestMigrateWritesTerminationMessage: a migration that cannot reach its database
// leaves why in the termination-message file, one line, without the password or the URL.
func TestMigrateWritesTerminationMessage(t *testing.T) {
	manifest := testsupport.StripeEndpointFile(t, "http://127.0.0.1:9/")
	const password = "s3cret-Pw-4711"
	dbURL := "postgres://hk:" + password + "@" + testsupport.FreeAddr(t) + "/app?sslmode=disable&connect_timeout=5"
	for name, tc := range map[string]struct {
		url, want string
		flag      bool
	}{
		"closed port, path from the environment": {dbURL, "connect to the database: ", false},
		"closed port, path from the flag":        {dbURL, "connection refused", true},
		"no database URL":                        {"", config.EnvDatabaseURL + " is not set", false},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "termination-log")
			t.Setenv(config.EnvDatabaseURL, tc.url)
			args := []string{"--endpoint", manifest, "--timeout", "20s"}
			if tc.flag {
				t.Setenv(EnvTerminationMessagePath, "")
				args = append(args, "--termination-message-path", path)
			} else {
				t.Setenv(EnvTerminationMessagePath, path)
			}
			cmd := Migrate()
			cmd.SetArgs(args)
			cmd.SetOut(new(strings.Builder))
			cmd.SetErr(new(strings.Builder))
			err := cmd.Execute()
			if err == nil {
				t.Fatal("migrate succeeded without a database")
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
