package dataplanecmd

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/store"
)

// Migrate is the migrate subcommand, which the operator's migration Job runs.
func Migrate() *cobra.Command {
	var endpointFile string
	var timeout time.Duration
	var terminationPath string
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade hookkeeper's tables in the endpoint's database schema",
		Long: "migrate applies hookkeeper's embedded schema migrations to spec.database.schema of the\n" +
			"endpoint (from --endpoint FILE or " + config.EnvEndpoint + ") in the database at " +
			config.EnvDatabaseURL + ",\nunder a PostgreSQL advisory lock, and prints the version reached. " +
			"The operator's migration Job runs it.",
		Args: cobra.NoArgs,
		RunE: reportingFailure(&terminationPath, func(cmd *cobra.Command) error {
			url := os.Getenv(config.EnvDatabaseURL)
			we, err := config.ReadManifest(endpointFile, os.Getenv)
			if err != nil {
				return err
			}
			if url == "" {
				return fmt.Errorf("%s is not set", config.EnvDatabaseURL)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			schema := we.Spec.Database.Schema
			v, err := store.Migrate(ctx, url, schema)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "schema %s of endpoint %s/%s is at version %d\n", schema, we.Namespace, we.Name, v)
			return err
		}),
	}
	cmd.Flags().StringVar(&endpointFile, "endpoint", "", "WebhookEndpoint manifest (YAML or JSON); default: the "+config.EnvEndpoint+" variable")
	addTerminationFlag(cmd.Flags(), &terminationPath)
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "give up after this long (waiting for the migration lock included)")
	return cmd
}
