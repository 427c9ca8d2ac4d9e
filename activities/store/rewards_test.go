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
			{"enrol", func() (bool, error) { return s.RecordEnrolment(ctx, "c1", at(0)) }, true},
			{"enrol again", func() (bool, error) { return s.RecordEnrolment(ctx, "c1", at(time.Hour)) }, false},
			{"tier change", func() (bool, error) { return s.RecordTierChange(ctx, "c1", "bronze", "silver", 500, at(time.Minute)) }, true},
			{"tier change again", func() (bool, error) { return s.RecordTierChange(ctx, "c1", "bronze", "silver", 500, at(time.Minute)) }, false},
			{"next tier change", func() (bool, error) { return s.RecordTierChange(ctx, "c1", "silver", "gold", 1000, at(2*time.Minute)) }, true},
			{"unenrol", func() (bool, error) { return s.RecordUnenrolment(ctx, "c1", at(time.Hour)) }, true},
			{"unenrol again", func() (bool, error) { return s.RecordUnenrolment(ctx, "c1", at(2*time.Hour)) }, false},
			{"retried first enrolment", func() (bool, error) { return s.RecordEnrolment(ctx, "c1", at(0)) }, false},
		}
		for _, st := range steps {
			got, err := st.call()
			require.NoError(t, err, st.name)
			assert.Equal(t, st.want, got, st.name)
		}

		e, err := s.Enrolment(ctx, "c1")
		require.NoError(t, err)
		assert.Equal(t, EnrolmentRow{CustomerID: "c1", EnrolledAt: ptr(at(0)), UnenrolledAt: ptr(at(time.Hour))}, e)
		changes, err := s.TierChanges(ctx, "c1")
		require.NoError(t, err)
		assert.Equal(t, []TierChangeRow{
			{CustomerID: "c1", ChangedAt: at(time.Minute), From: "bronze", To: "silver", Points: 500},
			{CustomerID: "c1", ChangedAt: at(2 * time.Minute), From: "silver", To: "gold", Points: 1000},
		}, changes)

		_, err = s.Enrolment(ctx, "c2")
		assert.ErrorIs(t, err, ErrNotFound)
		changes, err = s.TierChanges(ctx, "c2")
		require.NoError(t, err)
		assert.Empty(t, changes)
	})
}

// An unenrolment may be recorded before its enrolment (or with none on record,
// for entities older than the database recorder); a later enrolment, after the
// entity ended, is a re-enrolment.
func TestRewardsOutOfOrderAndReEnrolment(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		steps := []struct {
			name string
			call func() (bool, error)
			want bool
			row  EnrolmentRow
		}{
			{"unenrol first", func() (bool, error) { return s.RecordUnenrolment(ctx, "c2", at(time.Hour)) }, true,
				EnrolmentRow{CustomerID: "c2", UnenrolledAt: ptr(at(time.Hour))}},
			{"late enrolment", func() (bool, error) { return s.RecordEnrolment(ctx, "c2", at(0)) }, true,
				EnrolmentRow{CustomerID: "c2", EnrolledAt: ptr(at(0)), UnenrolledAt: ptr(at(time.Hour))}},
			{"late enrolment retried", func() (bool, error) { return s.RecordEnrolment(ctx, "c2", at(0)) }, false,
				EnrolmentRow{CustomerID: "c2", EnrolledAt: ptr(at(0)), UnenrolledAt: ptr(at(time.Hour))}},
			{"re-enrolment", func() (bool, error) { return s.RecordEnrolment(ctx, "c2", at(2*time.Hour)) }, true,
				EnrolmentRow{CustomerID: "c2", EnrolledAt: ptr(at(2 * time.Hour))}},
			{"re-enrolment retried", func() (bool, error) { return s.RecordEnrolment(ctx, "c2", at(2*time.Hour)) }, false,
				EnrolmentRow{CustomerID: "c2", EnrolledAt: ptr(at(2 * time.Hour))}},
			{"second unenrolment", func() (bool, error) { return s.RecordUnenrolment(ctx, "c2", at(3*time.Hour)) }, true,
				EnrolmentRow{CustomerID: "c2", EnrolledAt: ptr(at(2 * time.Hour)), UnenrolledAt: ptr(at(3 * time.Hour))}},
		}
		for _, st := range steps {
			got, err := st.call()
			require.NoError(t, err, st.name)
			assert.Equal(t, st.want, got, st.name)
			row, err := s.Enrolment(ctx, "c2")
			require.NoError(t, err, st.name)
			assert.Equal(t, st.row, row, st.name)
		}
	})
}
