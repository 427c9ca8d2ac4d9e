package store

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseURL(t *testing.T) {
	tests := []struct {
		name    string
		url     string
		want    target
		wantErr string
	}{
		{name: "default", url: "", want: target{dialect: DialectSQLite, dsn: "data/entity.db?" + sqliteParams, where: "data/entity.db", mkdir: "data"}},
		{
			name: "postgres",
			url:  "postgres://u:secret@db.example:5432/entity?sslmode=disable",
			want: target{dialect: DialectPostgres, dsn: "postgres://u:secret@db.example:5432/entity?sslmode=disable", where: "db.example:5432/entity"},
		},
		{name: "postgresql", url: "postgresql://db/entity", want: target{dialect: DialectPostgres, dsn: "postgresql://db/entity", where: "db/entity"}},
		{name: "sqlite absolute", url: "sqlite:///var/lib/entity/e.db", want: target{dialect: DialectSQLite, dsn: "/var/lib/entity/e.db?" + sqliteParams, where: "/var/lib/entity/e.db", mkdir: "/var/lib/entity"}},
		{name: "sqlite relative", url: "sqlite://e.db", want: target{dialect: DialectSQLite, dsn: "e.db?" + sqliteParams, where: "e.db", mkdir: "."}},
		{
			name: "sqlite with driver parameters",
			url:  "sqlite://dir/e.db?_busy_timeout=50",
			want: target{dialect: DialectSQLite, dsn: "dir/e.db?_busy_timeout=50&" + sqliteParams, where: "dir/e.db", mkdir: "dir"},
		},
		{name: "file URI with parameters", url: "file:e.db?mode=rwc", want: target{dialect: DialectSQLite, dsn: "file:e.db?mode=rwc&" + sqliteParams, where: "file:e.db?mode=rwc"}},
		{name: "file URI", url: "file:e.db", want: target{dialect: DialectSQLite, dsn: "file:e.db?" + sqliteParams, where: "file:e.db"}},
		{name: "sqlite without path", url: "sqlite://", wantErr: "without a file path"},
		{name: "unsupported scheme", url: "mysql://u:secret@db/entity", wantErr: `unsupported scheme "mysql"`},
		{name: "bad postgres URL", url: "postgres://u:secret@db:port/entity", wantErr: "parse postgres DATABASE_URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseURL(tt.url)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				assert.NotContains(t, err.Error(), "secret")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

// TestOpenDefault opens the default database, ./data/entity.db, creating
// the directory.
func TestOpenDefault(t *testing.T) {
	t.Chdir(t.TempDir())
	s := openStore(t, "")
	assert.Equal(t, DialectSQLite, s.Dialect())
	require.NoError(t, s.Ping(context.Background()))
	_, err := os.Stat(DefaultSQLitePath)
	assert.NoError(t, err)

	var mode string
	require.NoError(t, s.db.QueryRow("PRAGMA journal_mode").Scan(&mode))
	assert.Equal(t, "wal", mode)
	var fk int
	require.NoError(t, s.db.QueryRow("PRAGMA foreign_keys").Scan(&fk))
	assert.Equal(t, 1, fk)
}
