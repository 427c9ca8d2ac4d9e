package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/workflows/platform"
)

func TestIsUnavailable(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"not found", fmt.Errorf("get run x: %w", ErrNotFound), false},
		{"conflict", fmt.Errorf("log run x: %w", ErrConflict), false},
		{"plain", errors.New("boom"), false},
		{"canceled", context.Canceled, false},
		{"deadline", fmt.Errorf("log run x: %w", context.DeadlineExceeded), true},
		{"bad connection", driver.ErrBadConn, true},
		{"connection done", sql.ErrConnDone, true},
		{"unexpected EOF", io.ErrUnexpectedEOF, true},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, true},
		{"postgres connection failure", &pgconn.PgError{Code: "08006"}, true},
		{"postgres too many connections", &pgconn.PgError{Code: "53300"}, true},
		{"postgres shutting down", &pgconn.PgError{Code: "57P01"}, true},
		{"postgres starting up", &pgconn.PgError{Code: "57P03"}, true},
		{"postgres serialization failure", &pgconn.PgError{Code: "40001"}, true},
		{"postgres unique violation", &pgconn.PgError{Code: "23505"}, false},
		{"postgres undefined table", &pgconn.PgError{Code: "42P01"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, IsUnavailable(tt.err))
		})
	}
}

// TestOpenDatabaseDown opens a PostgreSQL URL whose port nothing listens on.
func TestOpenDatabaseDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Open(ctx, "postgres://postgres:secret@"+addr+"/test?sslmode=disable")
	require.Error(t, err)
	assert.Nil(t, s)
	assert.True(t, IsUnavailable(err), "%v", err)
	assert.Contains(t, err.Error(), "open postgres database "+addr+"/test")
	assert.Contains(t, err.Error(), "connection refused")
	assert.NotContains(t, err.Error(), "secret")
}

// TestConnectionLost cuts the connections of an open PostgreSQL store.
func TestConnectionLost(t *testing.T) {
	u, err := url.Parse(postgresURL(t))
	require.NoError(t, err)
	p := dbtest.NewProxy(t, u.Host)
	u.Host = p.Addr()
	s := openStore(t, u.String())
	ctx := context.Background()
	_, err = s.LogRun(ctx, Run{RunRecord: platform.RunRecord{RunID: "r1", WorkflowID: "wf1", ActivityID: "act"}})
	require.NoError(t, err)

	p.Cut()
	_, err = s.LogRun(ctx, Run{RunRecord: platform.RunRecord{RunID: "r2", WorkflowID: "wf2", ActivityID: "act"}})
	require.Error(t, err)
	assert.True(t, IsUnavailable(err), "%v", err)
	assert.True(t, IsUnavailable(s.Ping(ctx)))
}

// TestSQLiteBusy holds SQLite's write lock in another connection longer than
// the store's busy timeout.
func TestSQLiteBusy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "entity.db")
	s := openStore(t, "sqlite://"+path+"?_busy_timeout=50")
	ctx := context.Background()

	other, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	defer other.Close()
	conn, err := other.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
	require.NoError(t, err)
	defer conn.ExecContext(ctx, "ROLLBACK")

	_, err = s.LogRun(ctx, Run{RunRecord: platform.RunRecord{RunID: "r1", WorkflowID: "wf1", ActivityID: "act"}})
	require.Error(t, err)
	assert.True(t, IsUnavailable(err), "%v", err)
	assert.Contains(t, err.Error(), "log run r1")
}
