package dataplanecmd

import (
	"errors"
	"io/fs"
	"os"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hookkeeper/hookkeeper/internal/config"
)

// EnvTerminationMessagePath overrides where migrate writes why it failed (tests, and
// the local cluster's node agent, which runs pods as processes).
const EnvTerminationMessagePath = "HOOKKEEPER_TERMINATION_MESSAGE_PATH"

// defaultTerminationMessagePath is the kubelet's default terminationMessagePath.
const defaultTerminationMessagePath = "/dev/termination-log"

// maxTerminationMessage is the kubelet's limit for one container's message.
const maxTerminationMessage = 4096

var (
	urlUserinfo = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://)[^/?#@\s]*@`)
	kvPassword  = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)
)

// redact removes credentials from msg: the database URL itself and its password
// wherever they appear, the userinfo of any URL, and key=value passwords.
func redact(msg, databaseURL string) string {
	if databaseURL != "" {
		msg = strings.ReplaceAll(msg, databaseURL, "$"+config.EnvDatabaseURL)
		// URL or key=value form, and a password PostgreSQL's rules take from elsewhere.
		if cfg, err := pgconn.ParseConfig(databaseURL); err == nil && cfg.Password != "" {
			msg = strings.ReplaceAll(msg, cfg.Password, "xxxxx")
		}
	}
	msg = urlUserinfo.ReplaceAllString(msg, "${1}xxxxx@")
	return kvPassword.ReplaceAllString(msg, "${1}xxxxx")
}

// terminationMessage is err as one redacted line of at most the kubelet's limit.
func terminationMessage(err error, databaseURL string) string {
	msg := strings.Join(strings.Fields(redact(err.Error(), databaseURL)), " ")
	if len(msg) > maxTerminationMessage {
		msg = msg[:maxTerminationMessage-3] + "..."
	}
	return msg
}

// writeTerminationMessage writes why the command failed where Kubernetes reads it: path
// if set (created if need be), else the default path only if it exists, as it does in a
// pod, so that a run outside a cluster creates nothing under /dev. Failing to write
// changes nothing: the error is printed to stderr anyway.
func writeTerminationMessage(path string, err error, databaseURL string) {
	flags := os.O_WRONLY | os.O_TRUNC
	if path == "" {
		path = defaultTerminationMessagePath
	} else {
		flags |= os.O_CREATE
	}
	f, openErr := os.OpenFile(path, flags, 0o644) //nolint:gosec // a path the pod spec or the operator chose
	if openErr != nil {
		if !errors.Is(openErr, fs.ErrNotExist) {
			_, _ = os.Stderr.WriteString("write termination message: " + redact(openErr.Error(), databaseURL) + "\n")
		}
		return
	}
	_, _ = f.WriteString(terminationMessage(err, databaseURL))
	_ = f.Close()
}

// addTerminationFlag registers --termination-message-path, where a failed run writes why.
func addTerminationFlag(fl *pflag.FlagSet, path *string) {
	fl.StringVar(path, "termination-message-path", os.Getenv(EnvTerminationMessagePath),
		"on failure, write the error (one line, credentials removed) to this file; default: the "+
			EnvTerminationMessagePath+" variable, else "+defaultTerminationMessagePath+" if it exists (as in a pod)")
}

// reportingFailure wraps a command's run so that its error also goes where Kubernetes
// shows it, the container's terminated state, not only in the log.
func reportingFailure(path *string, run func(cmd *cobra.Command) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		err := run(cmd)
		if err != nil {
			writeTerminationMessage(*path, err, os.Getenv(config.EnvDatabaseURL))
		}
		return err
	}
}
