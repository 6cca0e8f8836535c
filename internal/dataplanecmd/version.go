package dataplanecmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/hookkeeper/hookkeeper/internal/version"
)

// Version is the version subcommand.
func Version() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, VCS revision and Go version of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), version.Get())
			return err
		},
	}
}
