package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/entityflow/entityflow/tenant"
)

// EnrollmentRow is a rewards customer's enrollment, a row of
// rewards_enrollments. UnenrolledAt is nil while the customer is enrolled.
type EnrollmentRow struct {
	TenantID   string `json:"tenant_id"`
	CustomerID string `json:"customer_id"`
	// EnrolledAt is nil when only an unenrollment is on record.
	EnrolledAt   *time.Time `json:"enrolled_at"`
	UnenrolledAt *time.Time `json:"unenrolled_at"`
	// Left is the balance the customer unenrolled with; nil while enrolled
	// and for an unenrollment recorded without one (by a release before
	// migration 0008).
	Left *Balance `json:"left,omitempty"`
}

// Balance is a rewards customer's balance as the entity held it when the
// customer unenrolled.
type Balance struct {
	Points         int64 `json:"points"`
	LifetimePoints int64 `json:"lifetime_points"`
	EventCount     int64 `json:"event_count"`
}

// TierChangeRow is one tier change of a rewards customer, a row of
// rewards_tier_changes.
type TierChangeRow struct {
	TenantID   string    `json:"tenant_id"`
	CustomerID string    `json:"customer_id"`
	ChangedAt  time.Time `json:"changed_at"`
	From       string    `json:"from_tier"`
	To         string    `json:"to_tier"`
	Points     int64     `json:"points"`
}

// Every rewards fact belongs to a tenant's customer: the same customer ID in
// two tenants is two customers, with records of their own. The default
// tenant is "default" (tenant.Default), which every row written
// before tenants has; an empty tenant is refused, so that no row is written
// for no one.
//
// The tables keep the keys of the release before tenants, whose workers may
// still write them during a deploy (see migration 0007): a row's customer_id
// is its key, the bare customer ID for the default tenant's customers and
// {tenant}/{customer_id} for any other tenant's (rewardsKey), and tenant_id
// names the row's tenant.

// Enroll records that customer customerID of tenant is enrolled as of the
// given time and reports whether the customer is enrolled afterwards. A customer seen for
// the first time is enrolled; an enrolled one stays so, keeping the first
// enrollment time (a retry changes nothing); a customer who has unenrolled
// stays unenrolled, unless reopen is set, the explicit re-enrollment, which
// enrolls them again from the given time. Unenrollment is therefore final for
// every path but one: an event that starts a fresh entity after the old one
// ended (and after Temporal's retention forgot it) finds the record here.
func (s *Store) Enroll(ctx context.Context, tenant, customerID string, at time.Time, reopen bool) (enrolled bool, err error) {
	what := "enroll " + customerName(tenant, customerID)
	key, err := rewardsKey(tenant, customerID)
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	_, err = s.db.ExecContext(ctx, `INSERT INTO rewards_enrollments (customer_id, tenant_id, enrolled_at)
		VALUES ($1, $2, $3)
		ON CONFLICT (customer_id) DO UPDATE SET enrolled_at = excluded.enrolled_at, unenrolled_at = NULL
		WHERE rewards_enrollments.unenrolled_at IS NOT NULL AND $4 = TRUE`,
		key, tenant, dbTime(at), reopen)
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	row, err := s.Enrollment(ctx, tenant, customerID)
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	return row.UnenrolledAt == nil, nil
}

// RecordUnenrollment records that customer customerID of tenant left at the
// given time with the balance left, and reports whether this call recorded
// it; the first unenrollment of an enrollment is kept, with its balance. A
// customer with no enrollment on record (enrolled before the database
// recorder, or whose enrollment is still being recorded) gets a record
// holding only the unenrollment.
func (s *Store) RecordUnenrollment(ctx context.Context, tenant, customerID string, at time.Time, left Balance) (recorded bool, err error) {
	what := "record unenrollment of " + customerName(tenant, customerID)
	key, err := rewardsKey(tenant, customerID)
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	res, err := s.db.ExecContext(ctx, `INSERT INTO rewards_enrollments
		(customer_id, tenant_id, unenrolled_at, left_at, left_points, left_lifetime_points, left_event_count)
		VALUES ($1, $2, $3, $3, $4, $5, $6)
		ON CONFLICT (customer_id) DO UPDATE SET unenrolled_at = excluded.unenrolled_at, left_at = excluded.left_at,
			left_points = excluded.left_points, left_lifetime_points = excluded.left_lifetime_points,
			left_event_count = excluded.left_event_count
		WHERE rewards_enrollments.unenrolled_at IS NULL`,
		key, tenant, dbTime(at), left.Points, left.LifetimePoints, left.EventCount)
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	return affected(res, what)
}

// RecordTierChange records that customer customerID of tenant moved from
// tier from to tier to with the given points at the given time, and reports
// whether this call recorded it: the change (tenant, customer, time, new
// tier) is stored once.
func (s *Store) RecordTierChange(ctx context.Context, tenant, customerID, from, to string, points int64, at time.Time) (recorded bool, err error) {
	what := "record tier change of " + customerName(tenant, customerID)
	key, err := rewardsKey(tenant, customerID)
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	res, err := s.db.ExecContext(ctx, `INSERT INTO rewards_tier_changes (customer_id, tenant_id, changed_at, from_tier, to_tier, points)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`, key, tenant, dbTime(at), from, to, points)
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	return affected(res, what)
}

// Enrollment returns the enrollment of customer customerID of tenant, or
// ErrNotFound.
func (s *Store) Enrollment(ctx context.Context, tenant, customerID string) (EnrollmentRow, error) {
	what := "get enrollment of " + customerName(tenant, customerID)
	key, err := rewardsKey(tenant, customerID)
	if err != nil {
		return EnrollmentRow{}, fmt.Errorf("%s: %w", what, err)
	}
	e, err := queryOne(ctx, s.db, what, `SELECT enrolled_at, unenrolled_at, left_at, left_points, left_lifetime_points, left_event_count
		FROM rewards_enrollments WHERE customer_id = $1`, scanEnrollment, key)
	if err != nil {
		return EnrollmentRow{}, err
	}
	e.TenantID, e.CustomerID = tenant, customerID
	return e, nil
}

// scanEnrollment reads the times and left balance of one
// rewards_enrollments row; the caller fills in whose it is.
func scanEnrollment(row rowScanner) (EnrollmentRow, error) {
	var e EnrollmentRow
	var enrolled, unenrolled, leftAt scanTime
	var points, lifetime, events sql.NullInt64
	if err := row.Scan(&enrolled, &unenrolled, &leftAt, &points, &lifetime, &events); err != nil {
		return EnrollmentRow{}, err
	}
	e.EnrolledAt, e.UnenrolledAt = enrolled.ptr(), unenrolled.ptr()
	// The balance is this unenrollment's only when it was recorded with it.
	if unenrolled.valid && leftAt.valid && leftAt.t.Equal(unenrolled.t) {
		e.Left = &Balance{Points: points.Int64, LifetimePoints: lifetime.Int64, EventCount: events.Int64}
	}
	return e, nil
}

// TierChanges returns the tier changes of customer customerID of tenant in
// time order.
func (s *Store) TierChanges(ctx context.Context, tenant, customerID string) ([]TierChangeRow, error) {
	what := "list tier changes of " + customerName(tenant, customerID)
	key, err := rewardsKey(tenant, customerID)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return queryAll(ctx, s.db, what, `SELECT changed_at, from_tier, to_tier, points FROM rewards_tier_changes
		WHERE customer_id = $1 ORDER BY changed_at, to_tier`, func(row rowScanner) (TierChangeRow, error) {
		c := TierChangeRow{TenantID: tenant, CustomerID: customerID}
		var changed scanTime
		if err := row.Scan(&changed, &c.From, &c.To, &c.Points); err != nil {
			return TierChangeRow{}, err
		}
		c.ChangedAt = changed.t
		return c, nil
	}, key)
}

// rewardsKey returns the customer_id of the rows of tenantID's customer
// customerID: the customer ID itself for the default tenant, as in the rows
// of the release before tenants, and tenantID/customerID for any other. An
// empty tenant, which would record a fact for no one, is refused, and so is
// a '/' in either ID, which could make two customers' keys one (the ID rules
// of workflows and tenant allow none).
func rewardsKey(tenantID, customerID string) (string, error) {
	switch {
	case tenantID == "":
		return "", errors.New("a tenant is required")
	case strings.Contains(tenantID, "/"):
		return "", fmt.Errorf("tenant %q holds a '/'", tenantID)
	case strings.Contains(customerID, "/"):
		return "", fmt.Errorf("customer ID %q holds a '/'", customerID)
	case tenantID == tenant.Default:
		return customerID, nil
	}
	return tenantID + "/" + customerID, nil
}

// customerName names a tenant's customer in errors: tenant/customer.
func customerName(tenant, customerID string) string { return tenant + "/" + customerID }

// affected reports whether res changed a row; what names the operation in
// errors.
func affected(res sql.Result, what string) (bool, error) {
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	return n > 0, nil
}
