package rewards_test

import (
	"fmt"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/entityflow/entityflow/tenant"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// From release 4 a run checks its workflow ID against its tenant and
// customer and fails a fresh start that does not match. A run of releases 1
// to 3 (held back by RewardsReleaseCap) serves the default tenant only: a
// tenant's entity fails its workflow task there, at every one of them
// (release 1 has no ID check of its own), rather than run as the default
// tenant's customer or fail the workflow.
func TestWorkflowIDMustMatchTenantAndCustomer(t *testing.T) {
	const (
		serves    = iota
		failsRun  // the workflow fails InvalidRewardsInput
		failsTask // the workflow task fails; the workflow does not
	)
	tests := []struct {
		name   string
		cap    int // 0: no cap, the newest release
		tenant string
		id     string
		// wantTenant is the status's tenant_id when the run serves.
		wantTenant string
		outcome    int
	}{
		{"tenant entity", 0, "t-1", "rewards/t-1/c-1", "t-1", serves},
		{"default tenant", 0, "", "rewards-c-1", "", serves},
		{"default tenant named", 0, tenant.Default, "rewards-c-1", "", serves},
		{"tenant input, default ID", 0, "t-1", "rewards-c-1", "", failsRun},
		{"default input, tenant ID", 0, "", "rewards/t-1/c-1", "", failsRun},
		{"another tenant's ID", 0, "t-2", "rewards/t-1/c-1", "", failsRun},
		{"another customer's ID", 0, "t-1", "rewards/t-1/c-2", "", failsRun},
		{"release 4: tenant entity", 4, "t-1", "rewards/t-1/c-1", "t-1", serves},
		{"release 3: tenant entity", 3, "t-1", "rewards/t-1/c-1", "", failsTask},
		{"release 3: tenant input, default ID", 3, "t-1", "rewards-c-1", "", failsTask},
		{"release 3: default tenant", 3, "", "rewards-c-1", "", serves},
		{"release 3: default tenant named", 3, tenant.Default, "rewards-c-1", "", serves},
		{"release 2: tenant entity", 2, "t-1", "rewards/t-1/c-1", "", failsTask},
		{"release 2: default tenant", 2, "", "rewards-c-1", "", serves},
		{"release 1: tenant entity", 1, "t-1", "rewards/t-1/c-1", "", failsTask},
		{"release 1: tenant input, default ID", 1, "t-1", "rewards-c-1", "", failsTask},
		{"release 1: default tenant", 1, "", "rewards-c-1", "", serves},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newEntity(t)
			h.workflowID = tt.id
			if tt.cap != 0 {
				h.prepare = func(_ int, env *testsuite.TestWorkflowEnvironment) {
					env.SetWorkerOptions(worker.Options{PreferredVersionProvider: rewards.RewardsReleaseCap(tt.cap)})
				}
			}
			var st rewards.Status
			res := h.run(rewards.RewardsInput{CustomerID: "c-1", TenantID: tt.tenant}, func(env *testsuite.TestWorkflowEnvironment) {
				signal(env, time.Second, event("k-1", 25))
				query(t, env, 2*time.Second, &st)
				unenroll(env, time.Minute)
			})
			switch tt.outcome {
			case failsRun:
				if errorType(res.err) != rewards.ErrInvalidInput || !nonRetryable(res.err) {
					t.Fatalf("%v, want a non-retryable %s", res.err, rewards.ErrInvalidInput)
				}
			case failsTask:
				if !failedTask(res.err) {
					t.Fatalf("%v, want the workflow task failed (a panic), not the workflow", res.err)
				}
			}
			if tt.outcome != serves {
				if len(h.rec.enrollments) != 0 || len(h.rec.unenrolled) != 0 {
					t.Fatalf("enrollments %+v, unenrollments %+v recorded by a run that does not serve the entity", h.rec.enrollments, h.rec.unenrolled)
				}
				return
			}
			if res.err != nil {
				t.Fatal(res.err)
			}
			if st.TenantID != tt.wantTenant || st.Points != 25 {
				t.Fatalf("status %+v, want tenant %q and 25 points", st, tt.wantTenant)
			}
			if len(h.rec.enrollments) != 1 || h.rec.enrollments[0].TenantID != tt.wantTenant {
				t.Fatalf("enrollments %+v, want one of tenant %q", h.rec.enrollments, tt.wantTenant)
			}
		})
	}
}

// A tenant's entity hands its tenant to every fact it records (so the
// database keeps it apart from other tenants' customers of the same ID), to
// the next run at ContinueAsNew, and to its status.
func TestTenantEntityKeepsItsTenant(t *testing.T) {
	h := newEntity(t)
	in := rewards.RewardsInput{CustomerID: "c-1", TenantID: "t-1", Options: rewards.Options{EventsPerRun: 3}}
	var statuses []*rewards.Status
	final, runs := h.until(in, func(run int, env *testsuite.TestWorkflowEnvironment) {
		st := &rewards.Status{}
		statuses = append(statuses, st)
		// Three events end the first run (events_per_run), two leave the
		// second one running until it unenrolls.
		n := 3
		if run > 1 {
			n = 2
			unenroll(env, time.Minute)
		}
		for i := range n {
			signal(env, time.Duration(i+1)*time.Second, event(fmt.Sprintf("r%d-%d", run, i), 200))
		}
		query(t, env, 1500*time.Millisecond, st)
	})
	if final.err != nil {
		t.Fatal(final.err)
	}
	if len(runs) != 2 || runs[0].next == nil || runs[0].next.TenantID != "t-1" {
		t.Fatalf("%d runs, first handing over %+v; want two runs, the second of tenant t-1", len(runs), runs[0].next)
	}
	for i, st := range statuses {
		if st.TenantID != "t-1" || st.CustomerID != "c-1" || st.Run != i+1 {
			t.Errorf("run %d: status %+v, want tenant t-1", i+1, st)
		}
	}
	if final.status.TenantID != "t-1" || final.status.Points != 1000 {
		t.Errorf("final status %+v, want tenant t-1 with 1000 points", final.status)
	}
	rec := h.rec
	if len(rec.enrollments) != 1 || len(rec.tierChanges) == 0 || len(rec.unenrolled) != 1 {
		t.Fatalf("recorded %d enrollments, %d tier changes, %d unenrollments; want 1, some, 1",
			len(rec.enrollments), len(rec.tierChanges), len(rec.unenrolled))
	}
	tenants := []string{rec.enrollments[0].TenantID, rec.unenrolled[0].TenantID}
	for _, c := range rec.tierChanges {
		tenants = append(tenants, c.TenantID)
	}
	for _, got := range tenants {
		if got != "t-1" {
			t.Fatalf("a fact recorded for tenant %q, want t-1 for all: %+v", got, rec)
		}
	}
}

// Tenant A's customer unenrolling keeps tenant B's customer of the same ID
// in: each tenant's entity asks about its own record.
func TestUnenrollmentOfOneTenantLeavesAnotherEnrolled(t *testing.T) {
	h := newEntity(t)
	left := h.run(rewards.RewardsInput{CustomerID: "c-1", TenantID: "t-a"}, func(env *testsuite.TestWorkflowEnvironment) {
		signal(env, time.Second, event("k-1", 25))
		unenroll(env, time.Minute)
	})
	if left.err != nil || left.status.Enrolled {
		t.Fatalf("tenant a's entity: %+v, %v; want it unenrolled", left.status, left.err)
	}
	tests := []struct {
		tenant   string
		enrolled bool
	}{
		{"t-b", true},
		{"", true},
		{"t-a", false},
	}
	for _, tt := range tests {
		t.Run(tenant.Normalize(tt.tenant), func(t *testing.T) {
			var st rewards.Status
			res := h.run(rewards.RewardsInput{CustomerID: "c-1", TenantID: tt.tenant}, func(env *testsuite.TestWorkflowEnvironment) {
				signal(env, time.Second, event("k-2", 5))
				query(t, env, 2*time.Second, &st)
				unenroll(env, time.Minute)
			})
			if res.err != nil {
				t.Fatal(res.err)
			}
			if st.Enrolled != tt.enrolled || (st.Points == 5) != tt.enrolled {
				t.Fatalf("status %+v, want enrolled=%v (with the event applied only then)", st, tt.enrolled)
			}
		})
	}
}
