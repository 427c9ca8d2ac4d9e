package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// DefaultSQLitePath is the SQLite file Open uses when DATABASE_URL is empty,
// relative to the working directory.
const DefaultSQLitePath = "data/entity.db"

// Pool sizes. SQLite gets one connection per process, so that the process's
// writers queue in Go's pool rather than in SQLite's busy handler, which
// sleeps with backoff and is unfair: with 16 goroutines mixing writes and
// reads, one connection matched the throughput of 2-8 while keeping the
// slowest call near 30ms instead of 0.4-0.9s. Other processes are waited
// for through busy_timeout.
const (
	sqliteMaxConns   = 1
	postgresMaxConns = 10
)

// target is a parsed DATABASE_URL: what to open and how to name it in errors.
type target struct {
	dialect string
	dsn     string // the driver's data source name
	where   string // location for messages, without credentials
	mkdir   string // directory to create before opening, if any
}

// parseURL turns a DATABASE_URL into a target; see Open for the forms.
func parseURL(databaseURL string) (target, error) {
	lower := strings.ToLower(databaseURL)
	switch {
	case databaseURL == "":
		return sqliteTarget(DefaultSQLitePath, "")
	case strings.HasPrefix(lower, "postgres://"), strings.HasPrefix(lower, "postgresql://"):
		u, err := url.Parse(databaseURL)
		if err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err // url.Error repeats the URL, password included
			}
			return target{}, fmt.Errorf("parse postgres DATABASE_URL: %w", err)
		}
		return target{dialect: DialectPostgres, dsn: databaseURL, where: u.Host + u.Path}, nil
	case strings.HasPrefix(lower, "sqlite://"):
		path, query, _ := strings.Cut(databaseURL[len("sqlite://"):], "?")
		return sqliteTarget(path, query)
	case strings.HasPrefix(lower, "file:"):
		return target{dialect: DialectSQLite, dsn: withParams(databaseURL), where: databaseURL}, nil
	}
	scheme, _, _ := strings.Cut(databaseURL, ":")
	return target{}, fmt.Errorf("DATABASE_URL: unsupported scheme %q (want postgres://, postgresql://, sqlite:// or file:)", scheme)
}

// sqliteTarget opens the SQLite file at path with the extra driver query
// parameters in query, which come first so that they override the defaults.
func sqliteTarget(path, query string) (target, error) {
	if path == "" {
		return target{}, errors.New("DATABASE_URL: sqlite:// URL without a file path")
	}
	dsn := path
	if query != "" {
		dsn += "?" + query
	}
	return target{dialect: DialectSQLite, dsn: withParams(dsn), where: path, mkdir: filepath.Dir(path)}, nil
}

// withParams appends sqliteParams to a SQLite data source name.
func withParams(dsn string) string {
	if strings.Contains(dsn, "?") {
		return dsn + "&" + sqliteParams
	}
	return dsn + "?" + sqliteParams
}

// open creates the database/sql handle without connecting, through opener
// (sql.OpenDB when nil).
func (t target) open(opener Opener) (*sql.DB, error) {
	if opener == nil {
		opener = func(_ string, c driver.Connector) *sql.DB { return sql.OpenDB(c) }
	}
	if t.dialect == DialectPostgres {
		cfg, err := pgx.ParseConfig(t.dsn)
		if err != nil {
			return nil, fmt.Errorf("parse postgres DATABASE_URL: %w", err)
		}
		db := opener(t.dialect, stdlib.GetConnector(*cfg))
		db.SetMaxOpenConns(postgresMaxConns)
		db.SetMaxIdleConns(postgresMaxConns)
		db.SetConnMaxIdleTime(5 * time.Minute)
		return db, nil
	}
	if t.mkdir != "" {
		if err := os.MkdirAll(t.mkdir, 0o755); err != nil {
			return nil, fmt.Errorf("create directory of sqlite database %s: %w", t.where, err)
		}
	}
	drv, err := sqliteDriver()
	if err != nil {
		return nil, fmt.Errorf("open sqlite database %s: %w", t.where, err)
	}
	db := opener(t.dialect, sqliteConnector{dsn: t.dsn, driver: drv})
	db.SetMaxOpenConns(sqliteMaxConns)
	db.SetMaxIdleConns(sqliteMaxConns)
	return db, nil
}

// sqliteDriver is the driver modernc.org/sqlite registers as "sqlite".
func sqliteDriver() (driver.Driver, error) {
	db, err := sql.Open("sqlite", "")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	return db.Driver(), nil
}

// sqliteConnector opens connections to the SQLite database dsn through
// driver, as sql.Open("sqlite", dsn) would: modernc.org/sqlite has no
// connector of its own.
type sqliteConnector struct {
	dsn    string
	driver driver.Driver
}

// Connect opens one connection.
func (c sqliteConnector) Connect(context.Context) (driver.Conn, error) {
	return c.driver.Open(c.dsn)
}

// Driver is the connector's driver.
func (c sqliteConnector) Driver() driver.Driver { return c.driver }
