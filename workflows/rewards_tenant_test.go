package workflows_test

import (
	"fmt"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/entityflow/entityflow/workflows"
)

// From release 4 a run checks its workflow ID against its tenant and
// customer; a run of release 3 or below (held back by RewardsReleaseCap)
// checks it as release 2 did, so it serves the default tenant only and a
// tenant's entity fails rather than run as the default tenant's customer.
func TestWorkflowIDMustMatchTenantAndCustomer(t *testing.T) {
	tests := []struct {
		name   string
		cap    int // 0: no cap, the newest release
		tenant string
		id     string
		// wantTenant is the status's tenant_id when the run succeeds; fail
		// says it fails InvalidRewardsInput instead.
		wantTenant string
		fail       bool
	}{
		{"tenant entity", 0, "t-1", "rewards/t-1/c-1", "t-1", false},
		{"default tenant", 0, "", "rewards-c-1", "", false},
		{"default tenant named", 0, workflows.DefaultTenant, "rewards-c-1", "", false},
		{"tenant input, default ID", 0, "t-1", "rewards-c-1", "", true},
		{"default input, tenant ID", 0, "", "rewards/t-1/c-1", "", true},
		{"another tenant's ID", 0, "t-2", "rewards/t-1/c-1", "", true},
		{"another customer's ID", 0, "t-1", "rewards/t-1/c-2", "", true},
		{"release 3: tenant entity", 3, "t-1", "rewards/t-1/c-1", "", true},
		{"release 3: tenant input, default ID", 3, "t-1", "rewards-c-1", "", false},
		{"release 3: default tenant", 3, "", "rewards-c-1", "", false},
		{"release 2: tenant entity", 2, "t-1", "rewards/t-1/c-1", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newEntity(t)
			h.workflowID = tt.id
			if tt.cap != 0 {
				h.prepare = func(_ int, env *testsuite.TestWorkflowEnvironment) {
					env.SetWorkerOptions(worker.Options{PreferredVersionProvider: workflows.RewardsReleaseCap(tt.cap)})
				}
			}
			var st workflows.Status
			res := h.run(workflows.RewardsInput{CustomerID: "c-1", TenantID: tt.tenant}, func(env *testsuite.TestWorkflowEnvironment) {
				signal(env, time.Second, event("k-1", 25))
				query(t, env, 2*time.Second, &st)
				unenroll(env, time.Minute)
			})
			if tt.fail {
				if errorType(res.err) != workflows.ErrInvalidInput || !nonRetryable(res.err) {
					t.Fatalf("%v, want a non-retryable %s", res.err, workflows.ErrInvalidInput)
				}
				if len(h.rec.enrollments) != 0 {
					t.Fatalf("enrollments %+v recorded by a run that failed its ID check", h.rec.enrollments)
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
	in := workflows.RewardsInput{CustomerID: "c-1", TenantID: "t-1", Options: workflows.Options{EventsPerRun: 3}}
	var statuses []*workflows.Status
	final, runs := h.until(in, func(run int, env *testsuite.TestWorkflowEnvironment) {
		st := &workflows.Status{}
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
	left := h.run(workflows.RewardsInput{CustomerID: "c-1", TenantID: "t-a"}, func(env *testsuite.TestWorkflowEnvironment) {
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
		t.Run(workflows.TenantOrDefault(tt.tenant), func(t *testing.T) {
			var st workflows.Status
			res := h.run(workflows.RewardsInput{CustomerID: "c-1", TenantID: tt.tenant}, func(env *testsuite.TestWorkflowEnvironment) {
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
