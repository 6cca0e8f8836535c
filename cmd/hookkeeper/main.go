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
	if err := rootCmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "hookkeeper:", err)
		os.Exit(1)
	}
}
