// Command hookkeeper is the one binary of hookkeeper: the operator (manager), the
// receiver and dispatcher, schema migrations, replay and the local cluster. Each
// subcommand lives in its own file and registers itself on rootCmd.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

var rootCmd = &cobra.Command{
	Use:           "hookkeeper",
	Short:         "Exactly-once webhook receivers for Kubernetes",
	SilenceUsage:  true,
	SilenceErrors: true,
}

func main() {
	if cmd, err := rootCmd.ExecuteC(); err != nil {
		fmt.Fprintln(os.Stderr, errorMessage(cmd, err))
		os.Exit(1)
	}
}

// errorMessage is what main prints for err: the error, then where the usage is (cmd is
// the command that failed, or the root for an unknown command).
func errorMessage(cmd *cobra.Command, err error) string {
	return fmt.Sprintf("hookkeeper: %v\nsee '%s --help'", err, cmd.CommandPath())
}
