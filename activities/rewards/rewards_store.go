package rewards

import (
	"context"

	"github.com/entityflow/entityflow/store"
	"github.com/entityflow/entityflow/tenant"
	rewardswf "github.com/entityflow/entityflow/workflows/rewards"
)

// StoreRecorder is the RewardsRecorder the worker uses: each fact becomes a
// row in the store under the customer's tenant (an input without one is the
// default tenant's), written once however often the activity runs.
type StoreRecorder struct {
	Store *store.Store
}

// RecordEnrollment stores the enrollment (the first one wins) and reports
// whether the customer is enrolled (store.Enroll); a customer who is not is
// answered with the balance stored with the unenrollment.
func (r StoreRecorder) RecordEnrollment(ctx context.Context, e rewardswf.Enrollment) (rewardswf.EnrollmentResult, error) {
	tenantID := tenant.Normalize(e.TenantID)
	enrolled, err := r.Store.Enroll(ctx, tenantID, e.CustomerID, e.EnrolledAt, e.Reenroll)
	if err != nil || enrolled {
		return rewardswf.EnrollmentResult{}, err
	}
	row, err := r.Store.Enrollment(ctx, tenantID, e.CustomerID)
	if err != nil {
		return rewardswf.EnrollmentResult{}, err
	}
	res := rewardswf.EnrollmentResult{Unenrolled: true}
	if l := row.Left; l != nil {
		res.Left = &rewardswf.Balance{Points: l.Points, LifetimePoints: l.LifetimePoints, EventCount: l.EventCount}
	}
	return res, nil
}

// RecordTierChange stores the tier change (once per customer, time and tier).
func (r StoreRecorder) RecordTierChange(ctx context.Context, c rewardswf.TierChange) error {
	_, err := r.Store.RecordTierChange(ctx, tenant.Normalize(c.TenantID), c.CustomerID, string(c.From), string(c.To), c.Points, c.ChangedAt)
	return err
}

// RecordUnenrollment stores the unenrollment with the balance left (only the
// first one sets them).
func (r StoreRecorder) RecordUnenrollment(ctx context.Context, u rewardswf.Unenrollment) error {
	left := store.Balance{Points: u.Points, LifetimePoints: u.LifetimePoints, EventCount: u.EventCount}
	_, err := r.Store.RecordUnenrollment(ctx, tenant.Normalize(u.TenantID), u.CustomerID, u.UnenrolledAt, left)
	return err
}
