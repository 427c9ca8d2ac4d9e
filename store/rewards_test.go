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
			{"enrol", func() (bool, error) { return s.Enrol(ctx, "c1", at(0), false) }, true},
			{"enrol again", func() (bool, error) { return s.Enrol(ctx, "c1", at(time.Hour), false) }, true},
			{"tier change", func() (bool, error) { return s.RecordTierChange(ctx, "c1", "bronze", "silver", 500, at(time.Minute)) }, true},
			{"tier change again", func() (bool, error) { return s.RecordTierChange(ctx, "c1", "bronze", "silver", 500, at(time.Minute)) }, false},
			{"next tier change", func() (bool, error) { return s.RecordTierChange(ctx, "c1", "silver", "gold", 1000, at(2*time.Minute)) }, true},
			{"unenrol", func() (bool, error) { return s.RecordUnenrolment(ctx, "c1", at(time.Hour)) }, true},
			{"unenrol again", func() (bool, error) { return s.RecordUnenrolment(ctx, "c1", at(2*time.Hour)) }, false},
			{"retried first enrolment", func() (bool, error) { return s.Enrol(ctx, "c1", at(0), false) }, false},
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

// Unenrolment is final: an enrolment after it (a fresh entity started by a
// stray event) finds the customer unenrolled and changes nothing; only the
// explicit re-enrolment reopens the record. An unenrolment may be recorded
// with no enrolment on record (entities older than the database recorder).
func TestUnenrolmentIsFinalUntilReenrolment(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		steps := []struct {
			name     string
			call     func() (bool, error)
			enrolled bool
			row      EnrolmentRow
		}{
			{"enrol", func() (bool, error) { return s.Enrol(ctx, "c2", at(0), false) }, true,
				EnrolmentRow{CustomerID: "c2", EnrolledAt: ptr(at(0))}},
			{"enrol retried", func() (bool, error) { return s.Enrol(ctx, "c2", at(0), false) }, true,
				EnrolmentRow{CustomerID: "c2", EnrolledAt: ptr(at(0))}},
			{"re-enrol while enrolled", func() (bool, error) { return s.Enrol(ctx, "c2", at(time.Minute), true) }, true,
				EnrolmentRow{CustomerID: "c2", EnrolledAt: ptr(at(0))}},
			{"unenrol", func() (bool, error) { return s.RecordUnenrolment(ctx, "c2", at(time.Hour)) }, true,
				EnrolmentRow{CustomerID: "c2", EnrolledAt: ptr(at(0)), UnenrolledAt: ptr(at(time.Hour))}},
			{"stray enrolment after unenrolment", func() (bool, error) { return s.Enrol(ctx, "c2", at(2*time.Hour), false) }, false,
				EnrolmentRow{CustomerID: "c2", EnrolledAt: ptr(at(0)), UnenrolledAt: ptr(at(time.Hour))}},
			{"re-enrolment", func() (bool, error) { return s.Enrol(ctx, "c2", at(3*time.Hour), true) }, true,
				EnrolmentRow{CustomerID: "c2", EnrolledAt: ptr(at(3 * time.Hour))}},
			{"re-enrolment retried", func() (bool, error) { return s.Enrol(ctx, "c2", at(3*time.Hour), true) }, true,
				EnrolmentRow{CustomerID: "c2", EnrolledAt: ptr(at(3 * time.Hour))}},
			{"second unenrolment", func() (bool, error) { return s.RecordUnenrolment(ctx, "c2", at(4*time.Hour)) }, true,
				EnrolmentRow{CustomerID: "c2", EnrolledAt: ptr(at(3 * time.Hour)), UnenrolledAt: ptr(at(4 * time.Hour))}},
			{"unenrolment with no enrolment on record", func() (bool, error) { return s.RecordUnenrolment(ctx, "c3", at(time.Hour)) }, true,
				EnrolmentRow{CustomerID: "c3", UnenrolledAt: ptr(at(time.Hour))}},
			{"enrolment after it", func() (bool, error) { return s.Enrol(ctx, "c3", at(2*time.Hour), false) }, false,
				EnrolmentRow{CustomerID: "c3", UnenrolledAt: ptr(at(time.Hour))}},
		}
		for _, st := range steps {
			got, err := st.call()
			require.NoError(t, err, st.name)
			assert.Equal(t, st.enrolled, got, st.name)
			row, err := s.Enrolment(ctx, st.row.CustomerID)
			require.NoError(t, err, st.name)
			assert.Equal(t, st.row, row, st.name)
		}
	})
}
