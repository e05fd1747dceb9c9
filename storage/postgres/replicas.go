package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/writerd/writerd/pipeline"
)

var _ pipeline.Replicas = (*Store)(nil)

// replicasGone is how long a replica's row outlives its last heartbeat:
// long past any window a reader asks for, short enough that a fleet's
// restarts do not pile rows up.
const replicasGone = 24 * time.Hour

// Seen records r as seen now, at the server's clock, on a connection of
// the pool and outside the group commit: one statement that also deletes
// the rows of replicas gone for a day.
func (s *Store) Seen(ctx context.Context, r pipeline.Replica) error {
	if s.isClosed() {
		return errClosedStore
	}
	_, err := s.pool.Exec(ctx, `WITH gone AS (DELETE FROM writerd_replicas WHERE seen_at < clock_timestamp() - $4::interval AND id <> $1)
INSERT INTO writerd_replicas (id, host, config, seen_at) VALUES ($1, $2, $3, clock_timestamp())
ON CONFLICT (id) DO UPDATE SET host = excluded.host, config = excluded.config, seen_at = excluded.seen_at`,
		r.ID, r.Host, r.Config, replicasGone)
	return wrapErr("record the replica", err)
}

// Replicas returns the replicas seen within the last within, at the
// server's clock, by id.
func (s *Store) Replicas(ctx context.Context, within time.Duration) ([]pipeline.Replica, error) {
	if s.isClosed() {
		return nil, errClosedStore
	}
	rows, err := s.pool.Query(ctx, "SELECT id, host, config, seen_at FROM writerd_replicas WHERE seen_at >= clock_timestamp() - $1::interval ORDER BY id", within)
	if err != nil {
		return nil, wrapErr("list the replicas", err)
	}
	rs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (pipeline.Replica, error) {
		var r pipeline.Replica
		err := row.Scan(&r.ID, &r.Host, &r.Config, &r.SeenAt)
		return r, err
	})
	return rs, wrapErr("list the replicas", err)
}
