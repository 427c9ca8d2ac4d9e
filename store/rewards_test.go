package store

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRewards(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		steps := []struct {
			name string
			call func() (bool, error)
			want bool
		}{
			{"enroll", func() (bool, error) { return s.Enroll(ctx, "default", "c1", at(0), false) }, true},
			{"enroll again", func() (bool, error) { return s.Enroll(ctx, "default", "c1", at(time.Hour), false) }, true},
			{"tier change", func() (bool, error) {
				return s.RecordTierChange(ctx, "default", "c1", "bronze", "silver", 500, at(time.Minute))
			}, true},
			{"tier change again", func() (bool, error) {
				return s.RecordTierChange(ctx, "default", "c1", "bronze", "silver", 500, at(time.Minute))
			}, false},
			{"next tier change", func() (bool, error) {
				return s.RecordTierChange(ctx, "default", "c1", "silver", "gold", 1000, at(2*time.Minute))
			}, true},
			{"unenroll", func() (bool, error) {
				return s.RecordUnenrollment(ctx, "default", "c1", at(time.Hour), Balance{Points: 1200, LifetimePoints: 1500, EventCount: 9})
			}, true},
			{"unenroll again", func() (bool, error) {
				return s.RecordUnenrollment(ctx, "default", "c1", at(2*time.Hour), Balance{Points: 1})
			}, false},
			{"retried first enrollment", func() (bool, error) { return s.Enroll(ctx, "default", "c1", at(0), false) }, false},
		}
		for _, st := range steps {
			got, err := st.call()
			require.NoError(t, err, st.name)
			assert.Equal(t, st.want, got, st.name)
		}

		e, err := s.Enrollment(ctx, "default", "c1")
		require.NoError(t, err)
		assert.Equal(t, EnrollmentRow{TenantID: "default", CustomerID: "c1", EnrolledAt: ptr(at(0)), UnenrolledAt: ptr(at(time.Hour)),
			Left: &Balance{Points: 1200, LifetimePoints: 1500, EventCount: 9}}, e, "the first unenrollment and its balance are kept")
		changes, err := s.TierChanges(ctx, "default", "c1")
		require.NoError(t, err)
		assert.Equal(t, []TierChangeRow{
			{TenantID: "default", CustomerID: "c1", ChangedAt: at(time.Minute), From: "bronze", To: "silver", Points: 500},
			{TenantID: "default", CustomerID: "c1", ChangedAt: at(2 * time.Minute), From: "silver", To: "gold", Points: 1000},
		}, changes)

		_, err = s.Enrollment(ctx, "default", "c2")
		assert.ErrorIs(t, err, ErrNotFound)
		changes, err = s.TierChanges(ctx, "default", "c2")
		require.NoError(t, err)
		assert.Empty(t, changes)
	})
}

// Unenrollment is final: an enrollment after it (a fresh entity started by a
// stray event) finds the customer unenrolled and changes nothing; only the
// explicit re-enrollment reopens the record. An unenrollment may be recorded
// with no enrollment on record (entities older than the database recorder).
// The balance the customer left with is kept with the unenrollment, until
// the re-enrollment.
func TestUnenrollmentIsFinalUntilReenrollment(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		left := Balance{Points: 65, LifetimePoints: 80, EventCount: 3}
		steps := []struct {
			name     string
			call     func() (bool, error)
			enrolled bool
			row      EnrollmentRow
		}{
			{"enroll", func() (bool, error) { return s.Enroll(ctx, "default", "c2", at(0), false) }, true,
				EnrollmentRow{TenantID: "default", CustomerID: "c2", EnrolledAt: ptr(at(0))}},
			{"enroll retried", func() (bool, error) { return s.Enroll(ctx, "default", "c2", at(0), false) }, true,
				EnrollmentRow{TenantID: "default", CustomerID: "c2", EnrolledAt: ptr(at(0))}},
			{"re-enroll while enrolled", func() (bool, error) { return s.Enroll(ctx, "default", "c2", at(time.Minute), true) }, true,
				EnrollmentRow{TenantID: "default", CustomerID: "c2", EnrolledAt: ptr(at(0))}},
			{"unenroll", func() (bool, error) { return s.RecordUnenrollment(ctx, "default", "c2", at(time.Hour), left) }, true,
				EnrollmentRow{TenantID: "default", CustomerID: "c2", EnrolledAt: ptr(at(0)), UnenrolledAt: ptr(at(time.Hour)), Left: &left}},
			{"stray enrollment after unenrollment", func() (bool, error) { return s.Enroll(ctx, "default", "c2", at(2*time.Hour), false) }, false,
				EnrollmentRow{TenantID: "default", CustomerID: "c2", EnrolledAt: ptr(at(0)), UnenrolledAt: ptr(at(time.Hour)), Left: &left}},
			{"re-enrollment", func() (bool, error) { return s.Enroll(ctx, "default", "c2", at(3*time.Hour), true) }, true,
				EnrollmentRow{TenantID: "default", CustomerID: "c2", EnrolledAt: ptr(at(3 * time.Hour))}},
			{"re-enrollment retried", func() (bool, error) { return s.Enroll(ctx, "default", "c2", at(3*time.Hour), true) }, true,
				EnrollmentRow{TenantID: "default", CustomerID: "c2", EnrolledAt: ptr(at(3 * time.Hour))}},
			{"second unenrollment", func() (bool, error) {
				return s.RecordUnenrollment(ctx, "default", "c2", at(4*time.Hour), Balance{Points: 7, LifetimePoints: 7, EventCount: 1})
			}, true,
				EnrollmentRow{TenantID: "default", CustomerID: "c2", EnrolledAt: ptr(at(3 * time.Hour)), UnenrolledAt: ptr(at(4 * time.Hour)),
					Left: &Balance{Points: 7, LifetimePoints: 7, EventCount: 1}}},
			{"unenrollment with no enrollment on record", func() (bool, error) { return s.RecordUnenrollment(ctx, "default", "c3", at(time.Hour), Balance{}) }, true,
				EnrollmentRow{TenantID: "default", CustomerID: "c3", UnenrolledAt: ptr(at(time.Hour)), Left: &Balance{}}},
			{"enrollment after it", func() (bool, error) { return s.Enroll(ctx, "default", "c3", at(2*time.Hour), false) }, false,
				EnrollmentRow{TenantID: "default", CustomerID: "c3", UnenrolledAt: ptr(at(time.Hour)), Left: &Balance{}}},
		}
		for _, st := range steps {
			got, err := st.call()
			require.NoError(t, err, st.name)
			assert.Equal(t, st.enrolled, got, st.name)
			row, err := s.Enrollment(ctx, "default", st.row.CustomerID)
			require.NoError(t, err, st.name)
			assert.Equal(t, st.row, row, st.name)
		}
	})
}

// The same customer ID in two tenants is two customers: one's unenrollment
// does not keep the other out, and each sees only its own tier changes.
func TestRewardsAreTenantScoped(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		steps := []struct {
			name string
			call func() (bool, error)
			want bool
		}{
			{"a enrolls", func() (bool, error) { return s.Enroll(ctx, "t-a", "c-1", at(0), false) }, true},
			{"a's tier change", func() (bool, error) {
				return s.RecordTierChange(ctx, "t-a", "c-1", "basic", "gold", 500, at(time.Minute))
			}, true},
			{"a unenrolls", func() (bool, error) { return s.RecordUnenrollment(ctx, "t-a", "c-1", at(time.Hour), Balance{}) }, true},
			{"a stays out", func() (bool, error) { return s.Enroll(ctx, "t-a", "c-1", at(2*time.Hour), false) }, false},
			{"b's c-1 is new", func() (bool, error) { return s.Enroll(ctx, "t-b", "c-1", at(2*time.Hour), false) }, true},
			{"b's tier change at a's time", func() (bool, error) {
				return s.RecordTierChange(ctx, "t-b", "c-1", "basic", "gold", 500, at(time.Minute))
			}, true},
			{"b unenrolls on its own", func() (bool, error) { return s.RecordUnenrollment(ctx, "t-b", "c-1", at(3*time.Hour), Balance{}) }, true},
			{"the default tenant's c-1 is new", func() (bool, error) { return s.Enroll(ctx, "default", "c-1", at(4*time.Hour), false) }, true},
		}
		for _, st := range steps {
			got, err := st.call()
			require.NoError(t, err, st.name)
			assert.Equal(t, st.want, got, st.name)
		}

		rows := []EnrollmentRow{
			{TenantID: "t-a", CustomerID: "c-1", EnrolledAt: ptr(at(0)), UnenrolledAt: ptr(at(time.Hour)), Left: &Balance{}},
			{TenantID: "t-b", CustomerID: "c-1", EnrolledAt: ptr(at(2 * time.Hour)), UnenrolledAt: ptr(at(3 * time.Hour)), Left: &Balance{}},
			{TenantID: "default", CustomerID: "c-1", EnrolledAt: ptr(at(4 * time.Hour))},
		}
		for _, want := range rows {
			got, err := s.Enrollment(ctx, want.TenantID, want.CustomerID)
			require.NoError(t, err, want.TenantID)
			assert.Equal(t, want, got, want.TenantID)
		}
		_, err := s.Enrollment(ctx, "t-c", "c-1")
		assert.ErrorIs(t, err, ErrNotFound, "a tenant without the customer")

		for _, tenant := range []string{"t-a", "t-b"} {
			changes, err := s.TierChanges(ctx, tenant, "c-1")
			require.NoError(t, err)
			assert.Equal(t, []TierChangeRow{{TenantID: tenant, CustomerID: "c-1", ChangedAt: at(time.Minute), From: "basic", To: "gold", Points: 500}},
				changes, tenant)
		}
		changes, err := s.TierChanges(ctx, "default", "c-1")
		require.NoError(t, err)
		assert.Empty(t, changes)

		// The default tenant's customer under its bare ID, as before
		// tenants; another tenant's under its scoped key (migration 0007).
		assert.Equal(t, [][2]string{{"c-1", "default"}, {"t-a/c-1", "t-a"}, {"t-b/c-1", "t-b"}}, rewardsRows(t, s, "rewards_enrollments"))
		assert.Equal(t, [][2]string{{"t-a/c-1", "t-a"}, {"t-b/c-1", "t-b"}}, rewardsRows(t, s, "rewards_tier_changes"))
	})
}

// A fact for no tenant is refused rather than recorded under an empty one,
// and so is a '/' in a tenant or customer ID, the separator of the scoped
// keys: tenant "t" customer "a/c-1" and tenant "t/a" customer "c-1" would be
// one record, and tenant "a" customer "c-1" that of the default tenant's
// "a/c-1".
func TestRewardsNeedATenant(t *testing.T) {
	s := openStore(t, sqliteURL(t))
	ctx := context.Background()
	calls := []struct {
		name string
		call func() error
	}{
		{"enroll", func() error { _, err := s.Enroll(ctx, "", "c-1", at(0), false); return err }},
		{"unenroll", func() error { _, err := s.RecordUnenrollment(ctx, "", "c-1", at(0), Balance{}); return err }},
		{"tier change", func() error { _, err := s.RecordTierChange(ctx, "", "c-1", "basic", "gold", 500, at(0)); return err }},
	}
	for _, c := range calls {
		assert.ErrorContains(t, c.call(), "a tenant is required", c.name)
	}
	for _, id := range [][2]string{{"t/a", "c-1"}, {"t", "a/c-1"}, {"default", "a/c-1"}} {
		tenant, customer := id[0], id[1]
		calls := []struct {
			name string
			call func() error
		}{
			{"enroll", func() error { _, err := s.Enroll(ctx, tenant, customer, at(0), false); return err }},
			{"unenroll", func() error { _, err := s.RecordUnenrollment(ctx, tenant, customer, at(0), Balance{}); return err }},
			{"tier change", func() error {
				_, err := s.RecordTierChange(ctx, tenant, customer, "basic", "gold", 500, at(0))
				return err
			}},
			{"enrollment", func() error { _, err := s.Enrollment(ctx, tenant, customer); return err }},
			{"tier changes", func() error { _, err := s.TierChanges(ctx, tenant, customer); return err }},
		}
		for _, c := range calls {
			assert.ErrorContains(t, c.call(), "holds a '/'", "%s of %s/%s", c.name, tenant, customer)
		}
	}
	var rows int
	require.NoError(t, s.db.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM rewards_enrollments) + (SELECT COUNT(*) FROM rewards_tier_changes)`).Scan(&rows))
	assert.Zero(t, rows)
}
