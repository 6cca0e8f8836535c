// Package dataplanecmd holds the data-plane subcommands, receiver, migrate and version,
// and the error reporting of both binaries that carry them: hookkeeper (with the
// operator, replay and the local cluster) and hookkeeper-receiver (the data plane
// only, what receiver and migration pods run). It imports neither client-go nor
// controller-runtime; cmd/hookkeeper-receiver's tests keep it so.
package dataplanecmd

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// Execute runs root with the process's arguments and exits 1 with ErrorMessage when
// the command fails.
func Execute(root *cobra.Command) {
	if cmd, err := root.ExecuteC(); err != nil {
		fmt.Fprintln(os.Stderr, ErrorMessage(cmd, err))
		os.Exit(1)
	}
}

// ErrorMessage is what a binary prints for err: the error prefixed with the binary's
// name, then where the usage is (cmd is the command that failed, or the root for an
// unknown command).
func ErrorMessage(cmd *cobra.Command, err error) string {
	return fmt.Sprintf("%s: %v\nsee '%s --help'", cmd.Root().Name(), err, cmd.CommandPath())
}
