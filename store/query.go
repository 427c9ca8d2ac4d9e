package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// rowScanner is *sql.Row or *sql.Rows: what the scan functions of the
// tables read one row from.
type rowScanner interface {
	Scan(dest ...any) error
}

// querier runs queries: *sql.DB, *sql.Tx or *sql.Conn, so that the helpers
// below serve inside and outside a transaction alike.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// queryAll runs query on q and returns every row read by scan, in the
// query's order, and an empty (not nil) slice when there is none, so that
// lists encode as [] rather than null. Any error, from the query, a scan or
// the iteration, is wrapped as "what: err".
func queryAll[T any](ctx context.Context, q querier, what, query string, scan func(rowScanner) (T, error), args ...any) ([]T, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	all := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		all = append(all, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return all, nil
}

// queryOne runs query on q and returns the first row read by scan. No row is
// ErrNotFound; every error is wrapped as "what: err", so callers and their
// callers can test it with errors.Is.
func queryOne[T any](ctx context.Context, q querier, what, query string, scan func(rowScanner) (T, error), args ...any) (T, error) {
	v, err := scan(q.QueryRowContext(ctx, query, args...))
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		var zero T
		return zero, fmt.Errorf("%s: %w", what, err)
	}
	return v, nil
}
