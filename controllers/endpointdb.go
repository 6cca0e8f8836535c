package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// endpointDBTimeout bounds connecting and each read, so an unreachable database holds
// up a reconcile only this long per read.
const endpointDBTimeout = 5 * time.Second

// endpointDB is one reconcile's connection to the endpoint's database, through which
// the operator reads what receivers keep there (the schema version, the sink state, a
// pool's heartbeats). The first read connects; the others of the same reconcile reuse
// the connection; close ends it with the reconcile, so the operator keeps no database
// URL or session beyond a reconcile. (One connection per read cost three connects per
// reconcile, which at hundreds of pooled endpoints was a load of its own.)
type endpointDB struct {
	url  string
	conn *pgx.Conn
}

// read runs fn on the connection to url, connecting first if needed. A connection the
// read broke is dropped, so the next read connects anew.
func (db *endpointDB) read(ctx context.Context, url string, fn func(context.Context, *pgx.Conn) error) error {
	if url == "" {
		return errors.New("the database URL is not resolved")
	}
	ctx, cancel := context.WithTimeout(ctx, endpointDBTimeout)
	defer cancel()
	if db.conn != nil && db.url != url {
		db.close()
	}
	if db.conn == nil {
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			// pgx's parse error can echo the URL, password included.
			return errors.New("the database URL is not a valid PostgreSQL connection string")
		}
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return fmt.Errorf("connect to the database: %w", err)
		}
		db.conn, db.url = conn, url
	}
	err := fn(ctx, db.conn)
	if err != nil && db.conn.IsClosed() {
		db.conn, db.url = nil, ""
	}
	return err
}

// close ends the connection, if any.
func (db *endpointDB) close() {
	if db.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), endpointDBTimeout)
	defer cancel()
	_ = db.conn.Close(ctx)
	db.conn, db.url = nil, ""
}
