package activities

import (
	"context"

	"github.com/entityflow/entityflow/store"
	"github.com/entityflow/entityflow/workflows"
)

// StoreRecorder is the RewardsRecorder the worker uses: each fact becomes a
// row in the store under the customer's tenant (an input without one is the
// default tenant's), written once however often the activity runs.
type StoreRecorder struct {
	Store *store.Store
}

// RecordEnrollment stores the enrollment (the first one wins) and reports
// whether the customer is enrolled (store.Enroll).
func (r StoreRecorder) RecordEnrollment(ctx context.Context, e workflows.Enrollment) (bool, error) {
	return r.Store.Enroll(ctx, workflows.TenantOrDefault(e.TenantID), e.CustomerID, e.EnrolledAt, e.Reenroll)
}

// RecordTierChange stores the tier change (once per customer, time and tier).
func (r StoreRecorder) RecordTierChange(ctx context.Context, c workflows.TierChange) error {
	_, err := r.Store.RecordTierChange(ctx, workflows.TenantOrDefault(c.TenantID), c.CustomerID, string(c.From), string(c.To), c.Points, c.ChangedAt)
	return err
}

// RecordUnenrollment stores the unenrollment (only the first one sets it).
func (r StoreRecorder) RecordUnenrollment(ctx context.Context, u workflows.Unenrollment) error {
	_, err := r.Store.RecordUnenrollment(ctx, workflows.TenantOrDefault(u.TenantID), u.CustomerID, u.UnenrolledAt)
	return err
}
