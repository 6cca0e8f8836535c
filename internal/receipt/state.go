package receipt

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookkeeper/hookkeeper/internal/config"
)

// EntityState reads the state of the entity key of ep where the receipt transaction
// keeps it: the app's own table (spec.entity.table, within its tenant) or hookkeeper's
// entities table. found is false when there is no such entity.
func EntityState(ctx context.Context, pool *pgxpool.Pool, ep *config.Endpoint, key string) (state string, found bool, err error) {
	var (
		query string
		args  pgx.NamedArgs
	)
	if tbl := ep.Spec.Entity.Table; tbl != nil {
		q := appQuoted(ep)
		query = fmt.Sprintf(`SELECT a.%s::text FROM %s a WHERE %s`, q.state, q.table, q.where("a"))
		args = pgx.NamedArgs{"app_key": key}
		if tbl.Tenant != nil {
			args["tenant"] = tbl.Tenant.Value
		}
	} else {
		query = fmt.Sprintf(`SELECT state FROM %s WHERE endpoint = @endpoint AND entity_key = @entity_key`, ep.Tables.Entities)
		args = pgx.NamedArgs{"endpoint": ep.Key(), "entity_key": key}
	}
	switch err := pool.QueryRow(ctx, query, args).Scan(&state); {
	case errors.Is(err, pgx.ErrNoRows):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("read the state of entity %q: %w", key, err)
	}
	return state, true, nil
}
