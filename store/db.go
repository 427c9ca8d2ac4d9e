package store

import "database/sql"

// DB returns the Store's database handle, for packages that keep their own
// tables in the platform's database (such as internal/service/idempotency/sqlstore,
// whose table the Store's migrations create). Callers write SQL valid for
// Dialect, must not close the handle, and are responsible for their tables'
// consistency.
func (s *Store) DB() *sql.DB { return s.db }
