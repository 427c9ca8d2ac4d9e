package api_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/entityflow/entityflow/internal/infra/problem"
	"github.com/entityflow/entityflow/internal/service/idempotency/memory"
	"github.com/entityflow/entityflow/store"
	"github.com/entityflow/entityflow/tenant"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// Three tenants with a customer of the same ID, end to end on a dev server
// with the worker and the database: each tenant's c-1 is an entity of its
// own (rewards/{tenant}/c-1, and rewards-c-1 for the default tenant) with
// its own points, enrollment record and tier changes; the same
// Idempotency-Key in each tenant is three keys; one tenant's unenrollment
// leaves the others' customers enrolled; and a tenant without the customer
// gets the answer of a customer nobody has.
func TestTenantsHaveCustomersOfTheirOwn(t *testing.T) {
	s := newStack(t, memory.NewStore(0))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const path = "/v1/customers/c-1"
	unknownBefore := s.doAs("t-c", "GET", path, "", nil)
	if unknownBefore.status != http.StatusNotFound {
		t.Fatalf("an unknown customer: %d %s", unknownBefore.status, unknownBefore.body)
	}

	tenants := []struct {
		tenant, workflowID, statusTenant string
		points                           int64
	}{
		{"t-a", "rewards/t-a/c-1", "t-a", 25},
		{"t-b", "rewards/t-b/c-1", "t-b", 600}, // gold: a tier change
		{tenant.Default, "rewards-c-1", "", 7},
	}
	for _, tt := range tenants {
		r := s.doAs(tt.tenant, "POST", path+"/points", "k-same", map[string]any{"activity": "purchase", "points": tt.points})
		if r.status != http.StatusOK || r.replayed {
			t.Fatalf("%s: points with the key the others use: %d replayed=%v %s", tt.tenant, r.status, r.replayed, r.body)
		}
		if res := decode[rewards.PointsResult](t, r); !res.Applied || res.Duplicate || res.Points != tt.points {
			t.Fatalf("%s: %+v, want %d points applied as new", tt.tenant, res, tt.points)
		}
	}
	for _, tt := range tenants {
		st := decode[rewards.Status](t, s.doAs(tt.tenant, "GET", path, "", nil))
		if st.TenantID != tt.statusTenant || st.CustomerID != "c-1" || st.Points != tt.points || st.EventCount != 1 || st.Release != rewards.RewardsRelease {
			t.Errorf("%s: status %+v, want tenant %q with %d points from one event, release %d", tt.tenant, st, tt.statusTenant, tt.points, rewards.RewardsRelease)
		}
		if _, err := s.c.DescribeWorkflowExecution(ctx, tt.workflowID, ""); err != nil {
			t.Errorf("%s: entity %s: %v", tt.tenant, tt.workflowID, err)
		}
	}
	waitFor(t, ctx, "t-b's tier change recorded", func() error {
		changes, err := s.store.TierChanges(ctx, "t-b", "c-1")
		if err == nil && len(changes) == 0 {
			err = errors.New("none yet")
		}
		return err
	})
	for _, tenant := range []string{"t-a", tenant.Default} {
		if changes, err := s.store.TierChanges(ctx, tenant, "c-1"); err != nil || len(changes) != 0 {
			t.Errorf("%s: tier changes %+v, %v; want none (t-b's are its own)", tenant, changes, err)
		}
	}

	// t-a's customer leaves; t-b's and the default tenant's stay.
	if r := s.doAs("t-a", "POST", path+"/unenroll", "u-1", nil); r.status != http.StatusAccepted {
		t.Fatalf("t-a unenrolls: %d %s", r.status, r.body)
	}
	if err := s.c.GetWorkflow(ctx, "rewards/t-a/c-1", "").Get(ctx, nil); err != nil {
		t.Fatal(err)
	}
	r := s.doAs("t-a", "POST", path+"/points", "k-after", map[string]any{"points": 5})
	if r.status != http.StatusConflict || decode[problem.Details](t, r).Type != "https://entityflow.dev/problems/not-enrolled" {
		t.Fatalf("t-a after its unenrollment: %d %s, want 409 not-enrolled", r.status, r.body)
	}
	for _, tt := range tenants[1:] {
		r := s.doAs(tt.tenant, "POST", path+"/points", "k-after", map[string]any{"points": 5})
		if res := decode[rewards.PointsResult](t, r); r.status != http.StatusOK || res.Points != tt.points+5 {
			t.Errorf("%s after t-a's unenrollment: %d %s, want %d points", tt.tenant, r.status, r.body, tt.points+5)
		}
	}
	rows := []struct {
		tenant     string
		unenrolled bool
	}{
		{"t-a", true},
		{"t-b", false},
		{tenant.Default, false},
	}
	for _, row := range rows {
		e, err := s.store.Enrollment(ctx, row.tenant, "c-1")
		if err != nil || (e.UnenrolledAt != nil) != row.unenrolled || e.EnrolledAt == nil {
			t.Errorf("%s: enrollment %+v, %v; want enrolled, unenrolled=%v", row.tenant, e, err, row.unenrolled)
		}
	}

	// A tenant without the customer learns nothing of the others'.
	unknownAfter := s.doAs("t-c", "GET", path, "", nil)
	if unknownAfter.status != unknownBefore.status || string(unknownAfter.body) != string(unknownBefore.body) {
		t.Errorf("t-c's c-1 once three tenants have one: %d %s; before: %d %s", unknownAfter.status, unknownAfter.body, unknownBefore.status, unknownBefore.body)
	}
	if _, err := s.store.Enrollment(ctx, "t-c", "c-1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("t-c's enrollment: %v, want none", err)
	}
}

// waitFor calls check until it succeeds or ctx ends, which fails the test
// naming what it waited for and the last failure.
func waitFor(t *testing.T, ctx context.Context, what string, check func() error) {
	t.Helper()
	for {
		err := check()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
