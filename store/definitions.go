package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Definition is an activity's definition: the JSON document the activity is
// configured by, a row of activity_definitions.
type Definition struct {
	ActivityID string          `json:"activity_id"`
	TenantID   string          `json:"tenant_id"`
	Definition json.RawMessage `json:"definition"`
	// Revision counts the writes of the definition, from 1; it changes
	// with every PutDefinition and suits an ETag.
	Revision  int64     `json:"revision"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// EventTypes are the event types an event-triggered definition
	// subscribes to; PutDefinition keeps activity_subscriptions in step
	// with them. Reads leave it empty.
	EventTypes []string `json:"-"`
}

const definitionColumns = `activity_id, tenant_id, definition, revision, created_at, updated_at`

// PutDefinition stores d, replacing the document of an existing definition
// of the same tenant, and reports whether it created the definition. An
// activity ID another tenant holds is ErrConflict, also when two tenants
// race to create it: the check and the write are one statement. The write time
// d.UpdatedAt (default: the current time) becomes updated_at, and created_at
// of a new definition; an existing definition keeps its created_at. The
// document must be valid JSON and is stored compacted. Revision and CreatedAt
// of d are ignored.
func (s *Store) PutDefinition(ctx context.Context, d Definition) (created bool, err error) {
	if d.ActivityID == "" {
		return false, errors.New("put definition: activity_id is required")
	}
	var doc bytes.Buffer
	if err := json.Compact(&doc, d.Definition); err != nil {
		return false, fmt.Errorf("put definition %s: invalid JSON: %w", d.ActivityID, err)
	}
	at := d.UpdatedAt
	if at.IsZero() {
		at = now()
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("put definition %s: %w", d.ActivityID, err)
	}
	defer tx.Rollback()
	var revision int64
	err = tx.QueryRowContext(ctx, `INSERT INTO activity_definitions (`+definitionColumns+`)
		VALUES ($1, $2, $3, 1, $4, $4)
		ON CONFLICT (activity_id) DO UPDATE SET
			definition = excluded.definition,
			revision = activity_definitions.revision + 1,
			updated_at = excluded.updated_at
		WHERE activity_definitions.tenant_id = excluded.tenant_id
		RETURNING revision`,
		d.ActivityID, d.TenantID, doc.String(), dbTime(at)).Scan(&revision)
	if errors.Is(err, sql.ErrNoRows) {
		return false, fmt.Errorf("put definition %s: another tenant holds the activity ID: %w", d.ActivityID, ErrConflict)
	}
	if err != nil {
		return false, fmt.Errorf("put definition %s: %w", d.ActivityID, err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM activity_subscriptions WHERE activity_id = $1`, d.ActivityID); err != nil {
		return false, fmt.Errorf("put definition %s: clearing subscriptions: %w", d.ActivityID, err)
	}
	for _, eventType := range d.EventTypes {
		if _, err := tx.ExecContext(ctx, `INSERT INTO activity_subscriptions (tenant_id, event_type, activity_id)
			VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, d.TenantID, eventType, d.ActivityID); err != nil {
			return false, fmt.Errorf("put definition %s: subscribing to %s: %w", d.ActivityID, eventType, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("put definition %s: %w", d.ActivityID, err)
	}
	return revision == 1, nil
}

// GetDefinition returns the definition of activity activityID, or
// ErrNotFound.
func (s *Store) GetDefinition(ctx context.Context, activityID string) (Definition, error) {
	return queryOne(ctx, s.db, "get definition "+activityID,
		`SELECT `+definitionColumns+` FROM activity_definitions WHERE activity_id = $1`, scanDefinition, activityID)
}

// ListDefinitions returns every definition ordered by activity ID.
func (s *Store) ListDefinitions(ctx context.Context) ([]Definition, error) {
	return queryAll(ctx, s.db, "list definitions", `SELECT `+definitionColumns+` FROM activity_definitions ORDER BY activity_id`,
		scanDefinition)
}

// Subscribers returns the definitions of tenant tenantID subscribed to
// eventType, ordered by activity ID.
func (s *Store) Subscribers(ctx context.Context, tenantID, eventType string) ([]Definition, error) {
	return queryAll(ctx, s.db, "subscribers of "+tenantID+"/"+eventType,
		`SELECT d.activity_id, d.tenant_id, d.definition, d.revision, d.created_at, d.updated_at
		FROM activity_subscriptions s JOIN activity_definitions d ON d.activity_id = s.activity_id
		WHERE s.tenant_id = $1 AND s.event_type = $2 ORDER BY d.activity_id`, scanDefinition, tenantID, eventType)
}

// DeleteDefinition deletes the definition of activity activityID and reports
// whether there was one.
func (s *Store) DeleteDefinition(ctx context.Context, activityID string) (deleted bool, err error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM activity_definitions WHERE activity_id = $1`, activityID)
	if err != nil {
		return false, fmt.Errorf("delete definition %s: %w", activityID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("delete definition %s: %w", activityID, err)
	}
	return n > 0, nil
}

// scanDefinition reads the definitionColumns of one row.
func scanDefinition(row rowScanner) (Definition, error) {
	var d Definition
	var doc []byte
	var created, updated scanTime
	if err := row.Scan(&d.ActivityID, &d.TenantID, &doc, &d.Revision, &created, &updated); err != nil {
		return Definition{}, err
	}
	d.Definition = doc
	d.CreatedAt, d.UpdatedAt = created.t, updated.t
	return d, nil
}
