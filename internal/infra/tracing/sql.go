package tracing

import (
	"context"
	"database/sql"
	"database/sql/driver"

	"github.com/XSAM/otelsql"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// OpenDB is sql.OpenDB with a client span for each statement run through
// connector (otelsql), the statement's text in db.query.text and system
// (such as "postgresql" or "sqlite") in db.system.name. A statement is
// traced only inside a trace (an activity's, a request's): the statements
// of a migration or a background sweep make no root spans of their own.
func OpenDB(connector driver.Connector, system string) *sql.DB {
	return otelsql.OpenDB(connector,
		otelsql.WithAttributes(attribute.String("db.system.name", system)),
		otelsql.WithSpanOptions(otelsql.SpanOptions{
			OmitConnResetSession: true,
			OmitConnPrepare:      true,
			OmitRows:             true,
			OmitConnectorConnect: true,
			SpanFilter: func(ctx context.Context, _ otelsql.Method, _ string, _ []driver.NamedValue) bool {
				return trace.SpanContextFromContext(ctx).IsValid()
			},
		}))
}
