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
			{"enroll", func() (bool, error) { return s.Enroll(ctx, "c1", at(0), false) }, true},
			{"enroll again", func() (bool, error) { return s.Enroll(ctx, "c1", at(time.Hour), false) }, true},
			{"tier change", func() (bool, error) { return s.RecordTierChange(ctx, "c1", "bronze", "silver", 500, at(time.Minute)) }, true},
			{"tier change again", func() (bool, error) { return s.RecordTierChange(ctx, "c1", "bronze", "silver", 500, at(time.Minute)) }, false},
			{"next tier change", func() (bool, error) { return s.RecordTierChange(ctx, "c1", "silver", "gold", 1000, at(2*time.Minute)) }, true},
			{"unenroll", func() (bool, error) { return s.RecordUnenrollment(ctx, "c1", at(time.Hour)) }, true},
			{"unenroll again", func() (bool, error) { return s.RecordUnenrollment(ctx, "c1", at(2*time.Hour)) }, false},
			{"retried first enrollment", func() (bool, error) { return s.Enroll(ctx, "c1", at(0), false) }, false},
		}
		for _, st := range steps {
			got, err := st.call()
			require.NoError(t, err, st.name)
			assert.Equal(t, st.want, got, st.name)
		}

		e, err := s.Enrollment(ctx, "c1")
		require.NoError(t, err)
		assert.Equal(t, EnrollmentRow{CustomerID: "c1", EnrolledAt: ptr(at(0)), UnenrolledAt: ptr(at(time.Hour))}, e)
		changes, err := s.TierChanges(ctx, "c1")
		require.NoError(t, err)
		assert.Equal(t, []TierChangeRow{
			{CustomerID: "c1", ChangedAt: at(time.Minute), From: "bronze", To: "silver", Points: 500},
			{CustomerID: "c1", ChangedAt: at(2 * time.Minute), From: "silver", To: "gold", Points: 1000},
		}, changes)

		_, err = s.Enrollment(ctx, "c2")
		assert.ErrorIs(t, err, ErrNotFound)
		changes, err = s.TierChanges(ctx, "c2")
		require.NoError(t, err)
		assert.Empty(t, changes)
	})
}

// Unenrollment is final: an enrollment after it (a fresh entity started by a
// stray event) finds the customer unenrolled and changes nothing; only the
// explicit re-enrollment reopens the record. An unenrollment may be recorded
// with no enrollment on record (entities older than the database recorder).
func TestUnenrollmentIsFinalUntilReenrollment(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		steps := []struct {
			name     string
			call     func() (bool, error)
			enrolled bool
			row      EnrollmentRow
		}{
			{"enroll", func() (bool, error) { return s.Enroll(ctx, "c2", at(0), false) }, true,
				EnrollmentRow{CustomerID: "c2", EnrolledAt: ptr(at(0))}},
			{"enroll retried", func() (bool, error) { return s.Enroll(ctx, "c2", at(0), false) }, true,
				EnrollmentRow{CustomerID: "c2", EnrolledAt: ptr(at(0))}},
			{"re-enroll while enrolled", func() (bool, error) { return s.Enroll(ctx, "c2", at(time.Minute), true) }, true,
				EnrollmentRow{CustomerID: "c2", EnrolledAt: ptr(at(0))}},
			{"unenroll", func() (bool, error) { return s.RecordUnenrollment(ctx, "c2", at(time.Hour)) }, true,
				EnrollmentRow{CustomerID: "c2", EnrolledAt: ptr(at(0)), UnenrolledAt: ptr(at(time.Hour))}},
			{"stray enrollment after unenrollment", func() (bool, error) { return s.Enroll(ctx, "c2", at(2*time.Hour), false) }, false,
				EnrollmentRow{CustomerID: "c2", EnrolledAt: ptr(at(0)), UnenrolledAt: ptr(at(time.Hour))}},
			{"re-enrollment", func() (bool, error) { return s.Enroll(ctx, "c2", at(3*time.Hour), true) }, true,
				EnrollmentRow{CustomerID: "c2", EnrolledAt: ptr(at(3 * time.Hour))}},
			{"re-enrollment retried", func() (bool, error) { return s.Enroll(ctx, "c2", at(3*time.Hour), true) }, true,
				EnrollmentRow{CustomerID: "c2", EnrolledAt: ptr(at(3 * time.Hour))}},
			{"second unenrollment", func() (bool, error) { return s.RecordUnenrollment(ctx, "c2", at(4*time.Hour)) }, true,
				EnrollmentRow{CustomerID: "c2", EnrolledAt: ptr(at(3 * time.Hour)), UnenrolledAt: ptr(at(4 * time.Hour))}},
			{"unenrollment with no enrollment on record", func() (bool, error) { return s.RecordUnenrollment(ctx, "c3", at(time.Hour)) }, true,
				EnrollmentRow{CustomerID: "c3", UnenrolledAt: ptr(at(time.Hour))}},
			{"enrollment after it", func() (bool, error) { return s.Enroll(ctx, "c3", at(2*time.Hour), false) }, false,
				EnrollmentRow{CustomerID: "c3", UnenrolledAt: ptr(at(time.Hour))}},
		}
		for _, st := range steps {
			got, err := st.call()
			require.NoError(t, err, st.name)
			assert.Equal(t, st.enrolled, got, st.name)
			row, err := s.Enrollment(ctx, st.row.CustomerID)
			require.NoError(t, err, st.name)
			assert.Equal(t, st.row, row, st.name)
		}
	})
}
