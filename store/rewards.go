package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// EnrollmentRow is a rewards customer's enrollment, a row of
// rewards_enrollments. UnenrolledAt is nil while the customer is enrolled.
type EnrollmentRow struct {
	CustomerID string `json:"customer_id"`
	// EnrolledAt is nil when only an unenrollment is on record.
	EnrolledAt   *time.Time `json:"enrolled_at"`
	UnenrolledAt *time.Time `json:"unenrolled_at"`
}

// TierChangeRow is one tier change of a rewards customer, a row of
// rewards_tier_changes.
type TierChangeRow struct {
	CustomerID string    `json:"customer_id"`
	ChangedAt  time.Time `json:"changed_at"`
	From       string    `json:"from_tier"`
	To         string    `json:"to_tier"`
	Points     int64     `json:"points"`
}

// Enroll records that customer customerID is enrolled as of the given time
// and reports whether the customer is enrolled afterwards. A customer seen for
// the first time is enrolled; an enrolled one stays so, keeping the first
// enrollment time (a retry changes nothing); a customer who has unenrolled
// stays unenrolled, unless reopen is set, the explicit re-enrollment, which
// enrolls them again from the given time. Unenrollment is therefore final for
// every path but one: an event that starts a fresh entity after the old one
// ended (and after Temporal's retention forgot it) finds the record here.
func (s *Store) Enroll(ctx context.Context, customerID string, at time.Time, reopen bool) (enrolled bool, err error) {
	_, err = s.db.ExecContext(ctx, `INSERT INTO rewards_enrollments (customer_id, enrolled_at)
		VALUES ($1, $2)
		ON CONFLICT (customer_id) DO UPDATE SET enrolled_at = excluded.enrolled_at, unenrolled_at = NULL
		WHERE rewards_enrollments.unenrolled_at IS NOT NULL AND $3 = TRUE`,
		customerID, dbTime(at), reopen)
	if err != nil {
		return false, fmt.Errorf("enroll %s: %w", customerID, err)
	}
	row, err := s.Enrollment(ctx, customerID)
	if err != nil {
		return false, fmt.Errorf("enroll %s: %w", customerID, err)
	}
	return row.UnenrolledAt == nil, nil
}

// RecordUnenrollment records that customer customerID left at the given time
// and reports whether this call recorded it; the first unenrollment of an
// enrollment is kept. A customer with no enrollment on record (enrolled before
// the database recorder, or whose enrollment is still being recorded) gets a
// record holding only the unenrollment.
func (s *Store) RecordUnenrollment(ctx context.Context, customerID string, at time.Time) (recorded bool, err error) {
	res, err := s.db.ExecContext(ctx, `INSERT INTO rewards_enrollments (customer_id, unenrolled_at)
		VALUES ($1, $2)
		ON CONFLICT (customer_id) DO UPDATE SET unenrolled_at = excluded.unenrolled_at
		WHERE rewards_enrollments.unenrolled_at IS NULL`, customerID, dbTime(at))
	if err != nil {
		return false, fmt.Errorf("record unenrollment of %s: %w", customerID, err)
	}
	return affected(res, "record unenrollment of "+customerID)
}

// RecordTierChange records that customer customerID moved from tier from to
// tier to with the given points at the given time, and reports whether this
// call recorded it: the change (customer, time, new tier) is stored once.
func (s *Store) RecordTierChange(ctx context.Context, customerID, from, to string, points int64, at time.Time) (recorded bool, err error) {
	res, err := s.db.ExecContext(ctx, `INSERT INTO rewards_tier_changes (customer_id, changed_at, from_tier, to_tier, points)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`, customerID, dbTime(at), from, to, points)
	if err != nil {
		return false, fmt.Errorf("record tier change of %s: %w", customerID, err)
	}
	return affected(res, "record tier change of "+customerID)
}

// Enrollment returns the enrollment of customer customerID, or ErrNotFound.
func (s *Store) Enrollment(ctx context.Context, customerID string) (EnrollmentRow, error) {
	e := EnrollmentRow{CustomerID: customerID}
	var enrolled, unenrolled scanTime
	err := s.db.QueryRowContext(ctx, `SELECT enrolled_at, unenrolled_at FROM rewards_enrollments WHERE customer_id = $1`,
		customerID).Scan(&enrolled, &unenrolled)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return EnrollmentRow{}, fmt.Errorf("get enrollment of %s: %w", customerID, err)
	}
	e.EnrolledAt, e.UnenrolledAt = enrolled.ptr(), unenrolled.ptr()
	return e, nil
}

// TierChanges returns the tier changes of customer customerID in time order.
func (s *Store) TierChanges(ctx context.Context, customerID string) ([]TierChangeRow, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT changed_at, from_tier, to_tier, points FROM rewards_tier_changes
		WHERE customer_id = $1 ORDER BY changed_at, to_tier`, customerID)
	if err != nil {
		return nil, fmt.Errorf("list tier changes of %s: %w", customerID, err)
	}
	defer rows.Close()
	changes := []TierChangeRow{}
	for rows.Next() {
		c := TierChangeRow{CustomerID: customerID}
		var changed scanTime
		if err := rows.Scan(&changed, &c.From, &c.To, &c.Points); err != nil {
			return nil, fmt.Errorf("list tier changes of %s: %w", customerID, err)
		}
		c.ChangedAt = changed.t
		changes = append(changes, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tier changes of %s: %w", customerID, err)
	}
	return changes, nil
}

// affected reports whether res changed a row; what names the operation in
// errors.
func affected(res sql.Result, what string) (bool, error) {
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	return n > 0, nil
}
