package sqlstore

// The statements run on both dialects as written: SQLite and PostgreSQL both
// take $N parameters, INSERT ... ON CONFLICT DO UPDATE ... WHERE and
// RETURNING. Times are Unix milliseconds of the application's clock (see the
// package comment).

// takeSQL claims the key when it is absent or its row has expired, in one
// statement: the conflicting row is updated only if it expired, and the
// row comes back (RETURNING) only if this statement wrote it. On PostgreSQL
// concurrent claimers of one key queue on the row's lock and see the
// winner's row, which has not expired; on SQLite writers are serialised by
// the database lock. Either way exactly one of them takes the key.
//
// $1 key, $2 fingerprint, $3 owner, $4 lock end, $5 now.
const takeSQL = `INSERT INTO idempotency_keys
	(key, fingerprint, state, owner, status, header, body, locked_until, expires_at, created_at, updated_at)
VALUES ($1, $2, 'in_progress', $3, NULL, NULL, NULL, $4, $4, $5, $5)
ON CONFLICT (key) DO UPDATE SET
	fingerprint = excluded.fingerprint,
	state = excluded.state,
	owner = excluded.owner,
	status = NULL,
	header = NULL,
	body = NULL,
	locked_until = excluded.locked_until,
	expires_at = excluded.expires_at,
	created_at = excluded.created_at,
	updated_at = excluded.updated_at
WHERE idempotency_keys.expires_at <= $5
RETURNING owner`

// readSQL reads the key's row for a claim that did not take it.
const readSQL = `SELECT fingerprint, state, status, header, body, expires_at, created_at
FROM idempotency_keys WHERE key = $1`

// completeSQL stores the owner's response while its lock holds.
//
// $1 key, $2 owner, $3 final state, $4 status, $5 header JSON, $6 body,
// $7 end of retention, $8 now.
const completeSQL = `UPDATE idempotency_keys SET
	state = $3, status = $4, header = $5, body = $6,
	locked_until = NULL, expires_at = $7, updated_at = $8
WHERE key = $1 AND owner = $2 AND state = 'in_progress' AND expires_at > $8`

// releaseSQL deletes the owner's claim while its lock holds.
//
// $1 key, $2 owner, $3 now.
const releaseSQL = `DELETE FROM idempotency_keys
WHERE key = $1 AND owner = $2 AND state = 'in_progress' AND expires_at > $3`

// reapSQL deletes the rows that expired by $1.
const reapSQL = `DELETE FROM idempotency_keys WHERE expires_at <= $1`
