package store

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// errScan is what failingScan returns.
var errScan = errors.New("scan failed")

// scanInt reads one integer column.
func scanInt(row rowScanner) (int, error) {
	var n int
	err := row.Scan(&n)
	return n, err
}

// failingScan fails on every row.
func failingScan(rowScanner) (int, error) { return 0, errScan }

func TestQueryAll(t *testing.T) {
	tests := []struct {
		name    string
		query   string
		scan    func(rowScanner) (int, error)
		want    []int
		wantErr bool
		wantIs  error // tested with errors.Is when set
	}{
		{name: "rows in order", query: `SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3`, scan: scanInt, want: []int{1, 2, 3}},
		{name: "no rows is empty, not nil", query: `SELECT 1 WHERE 1 = 0`, scan: scanInt, want: []int{}},
		{name: "scan error", query: `SELECT 1`, scan: failingScan, wantErr: true, wantIs: errScan},
		{name: "query error", query: `SELECT FROM WHERE`, scan: scanInt, wantErr: true},
	}
	eachBackend(t, func(t *testing.T, s *Store) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				got, err := queryAll(context.Background(), s.db, "numbers", tt.query, tt.scan)
				if !tt.wantErr {
					require.NoError(t, err)
					require.NotNil(t, got)
					assert.Equal(t, tt.want, got)
					return
				}
				require.Error(t, err)
				assert.Nil(t, got)
				assert.Regexp(t, `^numbers: `, err.Error())
				if tt.wantIs != nil {
					assert.ErrorIs(t, err, tt.wantIs)
				}
			})
		}
	})
}

func TestQueryOne(t *testing.T) {
	tests := []struct {
		name    string
		query   string
		scan    func(rowScanner) (int, error)
		want    int
		wantErr error // tested with errors.Is when set
	}{
		{name: "first row", query: `SELECT 7 UNION ALL SELECT 8`, scan: scanInt, want: 7},
		{name: "no row is ErrNotFound", query: `SELECT 1 WHERE 1 = 0`, scan: scanInt, wantErr: ErrNotFound},
		{name: "scan error", query: `SELECT 1`, scan: failingScan, wantErr: errScan},
	}
	eachBackend(t, func(t *testing.T, s *Store) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				got, err := queryOne(context.Background(), s.db, "number", tt.query, tt.scan)
				if tt.wantErr != nil {
					require.ErrorIs(t, err, tt.wantErr)
					assert.Regexp(t, `^number: `, err.Error())
					assert.Zero(t, got)
					return
				}
				require.NoError(t, err)
				assert.Equal(t, tt.want, got)
			})
		}
	})
}
