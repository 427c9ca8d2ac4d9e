package store

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMigrateScopesRewardsByTenant upgrades a database of the release before
// tenants, with customers and tier changes on record: migration 0007 makes
// every row the default tenant's, keeps it as it was (an unenrollment stays
// final), and lets another tenant's customer of the same ID have records of
// its own.
func TestMigrateScopesRewardsByTenant(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			url := b.url(t)
			old := openAtVersion(t, url, 6)
			_, err := old.db.ExecContext(ctx, `INSERT INTO rewards_enrollments (customer_id, enrolled_at, unenrolled_at)
				VALUES ($1, $2, NULL), ($3, $4, $5), ($6, NULL, $7)`,
				"in", dbTime(at(0)), "out", dbTime(at(0)), dbTime(at(time.Hour)), "only-out", dbTime(at(time.Hour)))
			require.NoError(t, err)
			_, err = old.db.ExecContext(ctx, `INSERT INTO rewards_tier_changes (customer_id, changed_at, from_tier, to_tier, points)
				VALUES ($1, $2, 'basic', 'gold', 500)`, "in", dbTime(at(time.Minute)))
			require.NoError(t, err)

			s := openStore(t, url)
			requireAllApplied(t, s)
			rows := []EnrollmentRow{
				{TenantID: "default", CustomerID: "in", EnrolledAt: ptr(at(0))},
				{TenantID: "default", CustomerID: "out", EnrolledAt: ptr(at(0)), UnenrolledAt: ptr(at(time.Hour))},
				{TenantID: "default", CustomerID: "only-out", UnenrolledAt: ptr(at(time.Hour))},
			}
			for _, want := range rows {
				got, err := s.Enrollment(ctx, want.TenantID, want.CustomerID)
				require.NoError(t, err, want.CustomerID)
				assert.Equal(t, want, got, want.CustomerID)
			}
			changes, err := s.TierChanges(ctx, "default", "in")
			require.NoError(t, err)
			assert.Equal(t, []TierChangeRow{{TenantID: "default", CustomerID: "in", ChangedAt: at(time.Minute), From: "basic", To: "gold", Points: 500}}, changes)

			enrolled, err := s.Enroll(ctx, "default", "out", at(2*time.Hour), false)
			require.NoError(t, err)
			assert.False(t, enrolled, "an unenrollment on record before the upgrade stays final")
			enrolled, err = s.Enroll(ctx, "t-1", "out", at(2*time.Hour), false)
			require.NoError(t, err)
			assert.True(t, enrolled, "another tenant's customer of the same ID is a new customer")
			recorded, err := s.RecordTierChange(ctx, "t-1", "in", "basic", "gold", 500, at(time.Minute))
			require.NoError(t, err)
			assert.True(t, recorded, "another tenant's tier change at the same time and tier")

			var enrollments, tierChanges int
			require.NoError(t, s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM rewards_enrollments`).Scan(&enrollments))
			require.NoError(t, s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM rewards_tier_changes`).Scan(&tierChanges))
			assert.Equal(t, 4, enrollments)
			assert.Equal(t, 2, tierChanges)
		})
	}
}

// After 0007 the rewards tables have the shape a fresh database gets and no
// trace of the rebuild: on SQLite no table is left behind, on PostgreSQL the
// primary keys keep the names of tables created under their own names.
func TestMigrateScopesRewardsByTenantLeavesNoTrace(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			s := openStore(t, b.url(t))
			var query string
			switch s.Dialect() {
			case DialectSQLite:
				query = `SELECT name FROM sqlite_schema WHERE type = 'table' AND name LIKE 'rewards%' ORDER BY name`
			case DialectPostgres:
				query = `SELECT conname FROM pg_constraint WHERE contype = 'p' AND conrelid::regclass::text LIKE 'rewards%' ORDER BY conname`
			}
			rows, err := s.db.QueryContext(ctx, query)
			require.NoError(t, err)
			defer rows.Close()
			var names []string
			for rows.Next() {
				var name string
				require.NoError(t, rows.Scan(&name))
				names = append(names, name)
			}
			require.NoError(t, rows.Err())
			want := map[string][]string{
				DialectSQLite:   {"rewards_enrollments", "rewards_tier_changes"},
				DialectPostgres: {"rewards_enrollments_pkey", "rewards_tier_changes_pkey"},
			}[s.Dialect()]
			assert.Equal(t, want, names)
		})
	}
}
