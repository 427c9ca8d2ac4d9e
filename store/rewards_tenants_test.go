package store

import (
	"context"
	"database/sql"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entityflow/entityflow/internal/testkit/testenv"
)

// prevReleaseCommit is the last commit of store/rewards.go before tenants
// (64edbbb, "store: API keys (migration 0006 api_keys)..."), whose workers
// share the database with the current release's during a rolling or
// versioned deploy: they run the statements below, verbatim, against a
// database migrated to 0007 until they drain.
const prevReleaseCommit = "64edbbb5a2bd340f124f367a1a80f4241f31c296"

// The previous release's rewards statements, copied verbatim from
// store/rewards.go as of prevReleaseCommit (Enroll, RecordUnenrollment,
// RecordTierChange, Enrollment, TierChanges). Never edit them: they are what
// the old workers run (TestPrevReleaseStatementsAreVerbatim checks them
// against git).
const (
	prevEnroll = `INSERT INTO rewards_enrollments (customer_id, enrolled_at)
		VALUES ($1, $2)
		ON CONFLICT (customer_id) DO UPDATE SET enrolled_at = excluded.enrolled_at, unenrolled_at = NULL
		WHERE rewards_enrollments.unenrolled_at IS NOT NULL AND $3 = TRUE`
	prevRecordUnenrollment = `INSERT INTO rewards_enrollments (customer_id, unenrolled_at)
		VALUES ($1, $2)
		ON CONFLICT (customer_id) DO UPDATE SET unenrolled_at = excluded.unenrolled_at
		WHERE rewards_enrollments.unenrolled_at IS NULL`
	prevRecordTierChange = `INSERT INTO rewards_tier_changes (customer_id, changed_at, from_tier, to_tier, points)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`
	prevEnrollment  = `SELECT enrolled_at, unenrolled_at FROM rewards_enrollments WHERE customer_id = $1`
	prevTierChanges = `SELECT changed_at, from_tier, to_tier, points FROM rewards_tier_changes
		WHERE customer_id = $1 ORDER BY changed_at, to_tier`
)

// prevRelease runs the previous release's statements as its Store methods
// did (same arguments, same results), for its only tenant, the default one.
type prevRelease struct{ db *sql.DB }

func (p prevRelease) enroll(customerID string, at time.Time, reopen bool) (bool, error) {
	if _, err := p.db.ExecContext(context.Background(), prevEnroll, customerID, dbTime(at), reopen); err != nil {
		return false, err
	}
	e, err := p.enrollment(customerID)
	if err != nil {
		return false, err
	}
	return e.UnenrolledAt == nil, nil
}

func (p prevRelease) recordUnenrollment(customerID string, at time.Time) (bool, error) {
	res, err := p.db.ExecContext(context.Background(), prevRecordUnenrollment, customerID, dbTime(at))
	if err != nil {
		return false, err
	}
	return affected(res, "record unenrollment")
}

func (p prevRelease) recordTierChange(customerID, from, to string, points int64, at time.Time) (bool, error) {
	res, err := p.db.ExecContext(context.Background(), prevRecordTierChange, customerID, dbTime(at), from, to, points)
	if err != nil {
		return false, err
	}
	return affected(res, "record tier change")
}

// enrollment returns the row as the previous release saw it: without a
// tenant.
func (p prevRelease) enrollment(customerID string) (EnrollmentRow, error) {
	var enrolled, unenrolled scanTime
	err := p.db.QueryRowContext(context.Background(), prevEnrollment, customerID).Scan(&enrolled, &unenrolled)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return EnrollmentRow{}, err
	}
	return EnrollmentRow{CustomerID: customerID, EnrolledAt: enrolled.ptr(), UnenrolledAt: unenrolled.ptr()}, nil
}

func (p prevRelease) tierChanges(customerID string) ([]TierChangeRow, error) {
	rows, err := p.db.QueryContext(context.Background(), prevTierChanges, customerID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	changes := []TierChangeRow{}
	for rows.Next() {
		c := TierChangeRow{CustomerID: customerID}
		var changed scanTime
		if err := rows.Scan(&changed, &c.From, &c.To, &c.Points); err != nil {
			return nil, err
		}
		c.ChangedAt = changed.t
		changes = append(changes, c)
	}
	return changes, rows.Err()
}

// The copies above are the previous release's statements character for
// character. Without git or the commit (a shallow clone) the check is
// skipped, unless REQUIRE_SERVICES is set.
func TestPrevReleaseStatementsAreVerbatim(t *testing.T) {
	_, err := exec.LookPath("git")
	testenv.Require(t, "git", err)
	out, err := exec.Command("git", "show", prevReleaseCommit+":store/rewards.go").Output()
	testenv.Require(t, "git history of store/rewards.go", err)
	for _, stmt := range []string{prevEnroll, prevRecordUnenrollment, prevRecordTierChange, prevEnrollment, prevTierChanges} {
		assert.Contains(t, string(out), "`"+stmt+"`", "not a statement of %s", prevReleaseCommit)
	}
}

// On a database migrated to 0007, the previous release's statements work
// and behave as they did for the default tenant's customers (first
// enrollment kept, unenrollment final until the re-enrollment, an
// unenrollment with no enrollment on record, tier changes stored once),
// beside another tenant's customer of the same ID, whom they neither see nor
// touch; the current release reads and continues what they wrote, and they
// what it wrote.
func TestPrevReleaseStatementsOnMigratedSchema(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		prev := prevRelease{db: s.db}
		steps := []struct {
			name string
			call func() (bool, error)
			want bool
		}{
			{"tenant a enrolls c-1", func() (bool, error) { return s.Enroll(ctx, "t-a", "c-1", at(0), false) }, true},
			{"tenant a's tier change", func() (bool, error) {
				return s.RecordTierChange(ctx, "t-a", "c-1", "basic", "gold", 500, at(time.Minute))
			}, true},
			{"tenant a unenrolls c-1", func() (bool, error) {
				return s.RecordUnenrollment(ctx, "t-a", "c-1", at(30*time.Minute), Balance{Points: 500})
			}, true},

			{"prev: enroll", func() (bool, error) { return prev.enroll("c-1", at(0), false) }, true},
			{"prev: enroll again", func() (bool, error) { return prev.enroll("c-1", at(time.Hour), false) }, true},
			{"prev: tier change at tenant a's time and tier", func() (bool, error) {
				return prev.recordTierChange("c-1", "basic", "gold", 500, at(time.Minute))
			}, true},
			{"prev: tier change again", func() (bool, error) {
				return prev.recordTierChange("c-1", "basic", "gold", 500, at(time.Minute))
			}, false},
			{"current: the same tier change", func() (bool, error) {
				return s.RecordTierChange(ctx, "default", "c-1", "basic", "gold", 500, at(time.Minute))
			}, false},
			{"prev: unenroll", func() (bool, error) { return prev.recordUnenrollment("c-1", at(time.Hour)) }, true},
			{"prev: unenroll again", func() (bool, error) { return prev.recordUnenrollment("c-1", at(2*time.Hour)) }, false},
			{"prev: stray enrollment after unenrollment", func() (bool, error) { return prev.enroll("c-1", at(2*time.Hour), false) }, false},
			{"current: stray enrollment", func() (bool, error) { return s.Enroll(ctx, "default", "c-1", at(2*time.Hour), false) }, false},
			{"prev: re-enrollment", func() (bool, error) { return prev.enroll("c-1", at(3*time.Hour), true) }, true},
			{"prev: re-enrollment retried", func() (bool, error) { return prev.enroll("c-1", at(3*time.Hour), true) }, true},
			{"current: unenroll", func() (bool, error) {
				return s.RecordUnenrollment(ctx, "default", "c-1", at(4*time.Hour), Balance{Points: 5})
			}, true},
			{"prev: unenroll after it", func() (bool, error) { return prev.recordUnenrollment("c-1", at(5*time.Hour)) }, false},
			{"prev: unenroll with no enrollment on record", func() (bool, error) { return prev.recordUnenrollment("c-2", at(time.Hour)) }, true},
			{"prev: enroll after it", func() (bool, error) { return prev.enroll("c-2", at(2*time.Hour), false) }, false},
			{"current: tenant a's c-1 stays out", func() (bool, error) { return s.Enroll(ctx, "t-a", "c-1", at(6*time.Hour), false) }, false},
			{"current: tenant b's c-2 is new", func() (bool, error) { return s.Enroll(ctx, "t-b", "c-2", at(6*time.Hour), false) }, true},
		}
		for _, st := range steps {
			got, err := st.call()
			require.NoError(t, err, st.name)
			assert.Equal(t, st.want, got, st.name)
		}

		enrollments := []EnrollmentRow{
			{TenantID: "default", CustomerID: "c-1", EnrolledAt: ptr(at(3 * time.Hour)), UnenrolledAt: ptr(at(4 * time.Hour)), Left: &Balance{Points: 5}},
			{TenantID: "default", CustomerID: "c-2", UnenrolledAt: ptr(at(time.Hour))},
			{TenantID: "t-a", CustomerID: "c-1", EnrolledAt: ptr(at(0)), UnenrolledAt: ptr(at(30 * time.Minute)), Left: &Balance{Points: 500}},
			{TenantID: "t-b", CustomerID: "c-2", EnrolledAt: ptr(at(6 * time.Hour))},
		}
		for _, want := range enrollments {
			got, err := s.Enrollment(ctx, want.TenantID, want.CustomerID)
			require.NoError(t, err, want)
			assert.Equal(t, want, got)
			if want.TenantID == "default" {
				old, err := prev.enrollment(want.CustomerID)
				require.NoError(t, err, want)
				want.TenantID, want.Left = "", nil
				assert.Equal(t, want, old, "the previous release reads the default tenant's row")
			}
		}
		changes, err := s.TierChanges(ctx, "default", "c-1")
		require.NoError(t, err)
		want := TierChangeRow{TenantID: "default", CustomerID: "c-1", ChangedAt: at(time.Minute), From: "basic", To: "gold", Points: 500}
		assert.Equal(t, []TierChangeRow{want}, changes)
		old, err := prev.tierChanges("c-1")
		require.NoError(t, err)
		want.TenantID = ""
		assert.Equal(t, []TierChangeRow{want}, old, "the previous release sees the default tenant's only")
		changes, err = s.TierChanges(ctx, "t-a", "c-1")
		require.NoError(t, err)
		assert.Equal(t, []TierChangeRow{{TenantID: "t-a", CustomerID: "c-1", ChangedAt: at(time.Minute), From: "basic", To: "gold", Points: 500}}, changes)

		assert.Equal(t, [][2]string{{"c-1", "default"}, {"c-2", "default"}, {"t-a/c-1", "t-a"}, {"t-b/c-2", "t-b"}},
			rewardsRows(t, s, "rewards_enrollments"), "the previous release's rows are the default tenant's")
		assert.Equal(t, [][2]string{{"c-1", "default"}, {"t-a/c-1", "t-a"}}, rewardsRows(t, s, "rewards_tier_changes"))
	})
}

// The balance kept with an unenrollment is that unenrollment's only: a
// release that records unenrollments without a balance (any before 0008's,
// as the previous release's statements here) leaves none, even when a
// balance of an earlier unenrollment is still in the row.
func TestUnenrollmentBalanceIsThatUnenrollments(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		prev := prevRelease{db: s.db}
		left := Balance{Points: 65, LifetimePoints: 80, EventCount: 3}
		steps := []struct {
			name string
			call func() (bool, error)
			want *Balance
		}{
			{"enroll", func() (bool, error) { return s.Enroll(ctx, "default", "c-1", at(0), false) }, nil},
			{"unenroll with a balance", func() (bool, error) { return s.RecordUnenrollment(ctx, "default", "c-1", at(time.Hour), left) }, &left},
			{"re-enroll", func() (bool, error) { return s.Enroll(ctx, "default", "c-1", at(2*time.Hour), true) }, nil},
			{"an older release unenrolls, without a balance", func() (bool, error) { return prev.recordUnenrollment("c-1", at(3*time.Hour)) }, nil},
			{"an older release re-enrolls", func() (bool, error) { return prev.enroll("c-1", at(4*time.Hour), true) }, nil},
			{"unenroll with a balance again", func() (bool, error) {
				return s.RecordUnenrollment(ctx, "default", "c-1", at(5*time.Hour), Balance{Points: 9})
			}, &Balance{Points: 9}},
		}
		for _, st := range steps {
			_, err := st.call()
			require.NoError(t, err, st.name)
			row, err := s.Enrollment(ctx, "default", "c-1")
			require.NoError(t, err, st.name)
			assert.Equal(t, st.want, row.Left, st.name)
		}
	})
}

// TestMigrateScopesRewardsByTenant upgrades a database of the release before
// tenants, with customers and tier changes on record, while that release's
// workers still use it: migration 0007 keeps every row as it was (the
// default tenant's, an unenrollment still final), the old workers' statements
// keep working on the rows on record, and another tenant's customer of the
// same ID has records of its own.
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
			assert.Equal(t, rewardsKeysBeforeTenants, rewardsKeys(t, s), "0007 keeps the keys")
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

			// An old worker, on its own connections, after the upgrade.
			prev := prevRelease{db: old.db}
			steps := []struct {
				name string
				call func() (bool, error)
				want bool
			}{
				{"prev: stray enrollment of out", func() (bool, error) { return prev.enroll("out", at(2*time.Hour), false) }, false},
				{"prev: tier change on record", func() (bool, error) {
					return prev.recordTierChange("in", "basic", "gold", 500, at(time.Minute))
				}, false},
				{"prev: unenroll in", func() (bool, error) { return prev.recordUnenrollment("in", at(2*time.Hour)) }, true},
				{"prev: re-enroll out", func() (bool, error) { return prev.enroll("out", at(3*time.Hour), true) }, true},
			}
			for _, st := range steps {
				got, err := st.call()
				require.NoError(t, err, st.name)
				assert.Equal(t, st.want, got, st.name)
			}
			in, err := s.Enrollment(ctx, "default", "in")
			require.NoError(t, err)
			assert.Equal(t, EnrollmentRow{TenantID: "default", CustomerID: "in", EnrolledAt: ptr(at(0)), UnenrolledAt: ptr(at(2 * time.Hour))}, in)
			out, err := s.Enrollment(ctx, "default", "out")
			require.NoError(t, err)
			assert.Equal(t, EnrollmentRow{TenantID: "default", CustomerID: "out", EnrolledAt: ptr(at(3 * time.Hour))}, out)
			out, err = s.Enrollment(ctx, "t-1", "out")
			require.NoError(t, err)
			assert.Equal(t, EnrollmentRow{TenantID: "t-1", CustomerID: "out", EnrolledAt: ptr(at(2 * time.Hour))}, out,
				"the old worker's re-enrollment is the default tenant's only")

			assert.Equal(t, [][2]string{{"in", "default"}, {"only-out", "default"}, {"out", "default"}, {"t-1/out", "t-1"}},
				rewardsRows(t, s, "rewards_enrollments"))
			assert.Equal(t, [][2]string{{"in", "default"}, {"t-1/in", "t-1"}}, rewardsRows(t, s, "rewards_tier_changes"))
		})
	}
}

// rewardsKeysBeforeTenants are the primary keys of the rewards tables as
// 0003 made them (and 0005 named them): the conflict targets of the previous
// release's statements.
var rewardsKeysBeforeTenants = map[string][]string{
	"rewards_enrollments":  {"customer_id"},
	"rewards_tier_changes": {"customer_id", "changed_at", "to_tier"},
}

// A fresh database gets the keys of the release before tenants and no other
// unique index; on PostgreSQL the primary keys keep the names of tables
// created under their own names.
func TestRewardsKeysAreThoseBeforeTenants(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *Store) {
		assert.Equal(t, rewardsKeysBeforeTenants, rewardsKeys(t, s))
		var unique []string
		switch s.Dialect() {
		case DialectSQLite:
			unique = queryStrings(t, s, `SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name LIKE 'rewards%' ORDER BY name`)
		case DialectPostgres:
			unique = queryStrings(t, s, `SELECT i.indexrelid::regclass::text FROM pg_index i
				WHERE i.indisunique AND i.indrelid::regclass::text LIKE 'rewards%' ORDER BY 1`)
		}
		assert.Equal(t, map[string][]string{
			DialectSQLite:   {"sqlite_autoindex_rewards_enrollments_1", "sqlite_autoindex_rewards_tier_changes_1"},
			DialectPostgres: {"rewards_enrollments_pkey", "rewards_tier_changes_pkey"},
		}[s.Dialect()], unique)
	})
}

// rewardsKeys returns the primary key columns of the rewards tables, in key
// order.
func rewardsKeys(t *testing.T, s *Store) map[string][]string {
	t.Helper()
	keys := map[string][]string{}
	for table := range rewardsKeysBeforeTenants {
		switch s.Dialect() {
		case DialectSQLite:
			keys[table] = queryStrings(t, s, `SELECT name FROM pragma_table_info($1) WHERE pk > 0 ORDER BY pk`, table)
		case DialectPostgres:
			keys[table] = queryStrings(t, s, `SELECT a.attname FROM pg_constraint c
				CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, n)
				JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
				WHERE c.contype = 'p' AND c.conrelid = $1::regclass ORDER BY k.n`, table)
		}
	}
	return keys
}

// rewardsRows returns the distinct (customer_id, tenant_id) of the rows of
// table, sorted.
func rewardsRows(t *testing.T, s *Store, table string) [][2]string {
	t.Helper()
	rows, err := s.db.QueryContext(context.Background(), `SELECT DISTINCT customer_id, tenant_id FROM `+table)
	require.NoError(t, err)
	defer rows.Close()
	var got [][2]string
	for rows.Next() {
		var r [2]string
		require.NoError(t, rows.Scan(&r[0], &r[1]))
		got = append(got, r)
	}
	require.NoError(t, rows.Err())
	slices.SortFunc(got, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	return got
}

// queryStrings returns the one text column of query's rows.
func queryStrings(t *testing.T, s *Store, query string, args ...any) []string {
	t.Helper()
	rows, err := s.db.QueryContext(context.Background(), query, args...)
	require.NoError(t, err)
	defer rows.Close()
	var got []string
	for rows.Next() {
		var v string
		require.NoError(t, rows.Scan(&v))
		got = append(got, v)
	}
	require.NoError(t, rows.Err())
	return got
}
