// Command hookkeeper is the full binary of hookkeeper: the operator (manager), the
// receiver and dispatcher, schema migrations, replay and the local cluster. Each
// operator-side subcommand lives in its own file and registers itself on rootCmd; the
// data-plane ones (receiver, migrate, version) come from internal/dataplanecmd, which
// cmd/hookkeeper-receiver shares.
package main

import (
	"github.com/spf13/cobra"

	"github.com/hookkeeper/hookkeeper/internal/dataplanecmd"
)

var rootCmd = &cobra.Command{
	Use:           "hookkeeper",
	Short:         "Exactly-once webhook receivers for Kubernetes",
	SilenceUsage:  true,
	SilenceErrors: true,
}

func init() {
	rootCmd.AddCommand(dataplanecmd.Receiver(), dataplanecmd.Migrate(), dataplanecmd.Version())
}

func main() { dataplanecmd.Execute(rootCmd) }
