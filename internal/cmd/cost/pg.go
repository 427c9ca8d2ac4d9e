package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// pgSnapshot is what PostgreSQL had counted at one moment for the server's
// two databases (tuples written, commits, history bytes: per database) and
// for the whole cluster (WAL position).
type pgSnapshot struct {
	// Inserted, Updated, Deleted: tuples written to the tables of the
	// server's databases (pg_stat_user_tables), but cluster_membership,
	// the server's own heartbeat, which is counted apart as Membership.
	Inserted, Updated, Deleted, Membership int64
	// Commits are the databases' committed transactions (pg_stat_database).
	Commits int64
	// HistoryBytes is the size of the stored history blobs (history_node).
	HistoryBytes int64
	// WAL is the cluster's write-ahead log position in bytes: every
	// database of the PostgreSQL server writes there, this run's and others'.
	WAL int64
}

// writes is the tuples written but the membership heartbeat.
func (s pgSnapshot) writes() int64 { return s.Inserted + s.Updated + s.Deleted }

// sub returns s - o.
func (s pgSnapshot) sub(o pgSnapshot) pgSnapshot {
	return pgSnapshot{Inserted: s.Inserted - o.Inserted, Updated: s.Updated - o.Updated, Deleted: s.Deleted - o.Deleted,
		Membership: s.Membership - o.Membership, Commits: s.Commits - o.Commits, HistoryBytes: s.HistoryBytes - o.HistoryBytes, WAL: s.WAL - o.WAL}
}

// pgStats reads snapshots of the server's databases.
type pgStats struct {
	conns []*pgx.Conn // the server's database first, then its visibility database
}

// openPG connects to each of the databases on the PostgreSQL server at
// hostPort as user.
func openPG(ctx context.Context, hostPort, user string, databases ...string) (*pgStats, error) {
	p := &pgStats{}
	for _, db := range databases {
		c, err := connectPG(ctx, fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", user, hostPort, db))
		if err != nil {
			p.close()
			return nil, fmt.Errorf("connecting to database %s: %w", db, err)
		}
		p.conns = append(p.conns, c)
	}
	return p, nil
}

// connectPG connects, trying again for up to 30 s while the server has no
// connection to spare (a PostgreSQL shared with other servers' pools).
func connectPG(ctx context.Context, url string) (*pgx.Conn, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := pgx.Connect(ctx, url)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "53300" || time.Now().After(deadline) {
			return c, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func (p *pgStats) close() {
	for _, c := range p.conns {
		_ = c.Close(context.Background())
	}
}

// snapshot reads the counters. PostgreSQL publishes a backend's counts when
// it goes idle (at most once a second), so a caller waits a few seconds
// after the work it measures before taking the second snapshot.
func (p *pgStats) snapshot(ctx context.Context) (pgSnapshot, error) {
	var s pgSnapshot
	for i, c := range p.conns {
		var ins, upd, del, member, commits int64
		err := c.QueryRow(ctx, `
			SELECT coalesce(sum(n_tup_ins) FILTER (WHERE relname <> 'cluster_membership'), 0)::bigint,
			       coalesce(sum(n_tup_upd) FILTER (WHERE relname <> 'cluster_membership'), 0)::bigint,
			       coalesce(sum(n_tup_del) FILTER (WHERE relname <> 'cluster_membership'), 0)::bigint,
			       coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del) FILTER (WHERE relname = 'cluster_membership'), 0)::bigint,
			       (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database())
			FROM pg_stat_user_tables`).Scan(&ins, &upd, &del, &member, &commits)
		if err != nil {
			return s, fmt.Errorf("reading the table statistics: %w", err)
		}
		s.Inserted += ins
		s.Updated += upd
		s.Deleted += del
		s.Membership += member
		s.Commits += commits
		if i == 0 {
			err = c.QueryRow(ctx, `SELECT coalesce(sum(octet_length(data)), 0)::bigint, pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint FROM history_node`).
				Scan(&s.HistoryBytes, &s.WAL)
			if err != nil {
				return s, fmt.Errorf("reading the history size and the WAL position: %w", err)
			}
		}
	}
	return s, nil
}
