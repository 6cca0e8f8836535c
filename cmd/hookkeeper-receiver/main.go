// Command hookkeeper-receiver is the data plane of hookkeeper alone: the receiver (and
// its outbox dispatcher), schema migrations and version, the subcommands receiver and
// migration pods run. It shares their implementation with hookkeeper
// (internal/dataplanecmd) but links neither client-go nor controller-runtime, so a
// receiver pod maps only the pages it uses; main_test.go fails if it ever does.
package main

import (
	"github.com/spf13/cobra"

	"github.com/hookkeeper/hookkeeper/internal/dataplanecmd"
)

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "hookkeeper-receiver",
		Short:         "The data plane of hookkeeper: receive, record and dispatch webhooks; migrate the schema",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(dataplanecmd.Receiver(), dataplanecmd.Migrate(), dataplanecmd.Version())
	return root
}

func main() { dataplanecmd.Execute(newRootCmd()) }
