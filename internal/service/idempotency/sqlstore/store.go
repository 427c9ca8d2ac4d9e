// Package sqlstore is a idempotency.KeyStore in the platform's database (SQLite or
// PostgreSQL, through the store package), for deployments that share
// Idempotency-Keys between API processes without running Redis.
//
// Keys live in the table idempotency_keys, created by the store's migration
// 0004. Its times (locked_until, expires_at, created_at, updated_at) are
// BIGINT Unix milliseconds of the application's clock (Store.Now), in both
// dialects: TTL arithmetic and comparisons are then the same integer SQL on
// both, and the lock and retention need no database clock. A row counts
// until expires_at (the lock's end while in progress, the end of retention
// once finished); an expired row is taken over by the next claim and deleted
// by Reap. Errors wrap the database's, so store.IsUnavailable tells an outage
// from a logical failure.
package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/store"
)

// claimAttempts bounds how often Claim retries when the row it lost to
// vanished or expired before it could be read (released, reaped): each retry
// is a fresh claim, so only a key changing hands continuously exhausts it.
const claimAttempts = 5

// Store is a idempotency.KeyStore in the platform's database. It is safe for
// concurrent use, by any number of processes sharing the database.
type Store struct {
	// Now is the store's clock; nil means time.Now. Every process sharing
	// the table should keep its clock in sync (NTP): locks and retention are
	// compared against it. Set it before first use.
	Now func() time.Time
	// OnReapError, if set, is told of each failed Reap of RunReaper (the
	// reaper carries on). Set it before RunReaper starts.
	OnReapError func(error)

	db *sql.DB
}

// New returns a Store on st's database, whose migrations have created the
// idempotency_keys table.
func New(st *store.Store) *Store {
	return &Store{db: st.DB()}
}

// Claim implements idempotency.KeyStore: one statement takes the key if it is free,
// and if it is not, a read of the row says why.
func (s *Store) Claim(ctx context.Context, key, fingerprint string, lockTTL time.Duration) (idempotency.Claim, error) {
	for range claimAttempts {
		now := s.nowMillis()
		owner := idempotency.NewOwnerToken()
		var got string
		err := s.db.QueryRowContext(ctx, takeSQL, key, fingerprint, owner, now+ttlMillis(lockTTL), now).Scan(&got)
		if err == nil {
			return idempotency.Claim{Outcome: idempotency.Claimed, Owner: got}, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return idempotency.Claim{}, fmt.Errorf("claim idempotency key: %w", err)
		}
		c, found, err := s.classify(ctx, key, fingerprint, now)
		if err != nil {
			return idempotency.Claim{}, fmt.Errorf("claim idempotency key: %w", err)
		}
		if found {
			return c, nil
		}
	}
	return idempotency.Claim{}, fmt.Errorf("claim idempotency key: it changed hands %d times during the claim", claimAttempts)
}

// classify reads the row that kept Claim from taking key and says what the
// claim found; found is false when the row is gone or expired by now, so
// that the claim should be tried again.
func (s *Store) classify(ctx context.Context, key, fingerprint string, now int64) (c idempotency.Claim, found bool, err error) {
	var (
		fp, state string
		status    sql.NullInt64
		header    sql.NullString
		body      []byte
		expiresAt int64
		createdAt int64 // when the current claim took the key
	)
	err = s.db.QueryRowContext(ctx, readSQL, key).Scan(&fp, &state, &status, &header, &body, &expiresAt, &createdAt)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return idempotency.Claim{}, false, nil
	case err != nil:
		return idempotency.Claim{}, false, fmt.Errorf("read key: %w", err)
	case expiresAt <= now:
		return idempotency.Claim{}, false, nil
	}
	switch {
	case fp != fingerprint:
		return idempotency.Claim{Outcome: idempotency.Mismatch}, true, nil
	case state == idempotency.StateInProgress:
		return idempotency.Claim{Outcome: idempotency.InProgress, RetryAfter: time.Duration(expiresAt-now) * time.Millisecond,
			Age: time.Duration(now-createdAt) * time.Millisecond}, true, nil
	}
	resp := idempotency.Response{Status: int(status.Int64), Body: body}
	if header.Valid {
		if err := json.Unmarshal([]byte(header.String), &resp.Header); err != nil {
			return idempotency.Claim{}, false, fmt.Errorf("decode stored header: %w", err)
		}
	}
	return idempotency.Claim{Outcome: idempotency.Replay, Response: &resp}, true, nil
}

// Complete implements idempotency.KeyStore with one guarded UPDATE.
func (s *Store) Complete(ctx context.Context, key, owner string, resp idempotency.Response, ttl time.Duration) error {
	header, err := json.Marshal(resp.Header)
	if err != nil {
		return fmt.Errorf("complete idempotency key: encode header: %w", err)
	}
	body := resp.Body
	if body == nil {
		body = []byte{}
	}
	now := s.nowMillis()
	res, err := s.db.ExecContext(ctx, completeSQL, key, owner, idempotency.FinalState(resp.Status), resp.Status,
		string(header), body, now+ttlMillis(ttl), now)
	if err != nil {
		return fmt.Errorf("complete idempotency key: %w", err)
	}
	return ownedRow(res, "complete")
}

// Release implements idempotency.KeyStore with one guarded DELETE.
func (s *Store) Release(ctx context.Context, key, owner string) error {
	res, err := s.db.ExecContext(ctx, releaseSQL, key, owner, s.nowMillis())
	if err != nil {
		return fmt.Errorf("release idempotency key: %w", err)
	}
	return ownedRow(res, "release")
}

// Ping implements idempotency.KeyStore with the database's ping.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("ping idempotency key database: %w", err)
	}
	return nil
}

// ownedRow turns a guarded statement's result into ErrNotOwner when it
// touched no row.
func ownedRow(res sql.Result, op string) error {
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("%s idempotency key: %w", op, err)
	}
	if n == 0 {
		return idempotency.ErrNotOwner
	}
	return nil
}

// nowMillis reads the store's clock in Unix milliseconds.
func (s *Store) nowMillis() int64 {
	if s.Now != nil {
		return s.Now().UnixMilli()
	}
	return time.Now().UnixMilli()
}

// ttlMillis is d in whole milliseconds, at least 1, so that a claim or a
// kept response always counts for a moment.
func ttlMillis(d time.Duration) int64 {
	return max(d.Milliseconds(), 1)
}

var _ idempotency.KeyStore = (*Store)(nil)
