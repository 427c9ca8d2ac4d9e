package integration_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	rewardsact "github.com/entityflow/entityflow/activities/rewards"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/internal/service/rewardsworker"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
	"github.com/entityflow/entityflow/internal/testkit/histories"
	"github.com/entityflow/entityflow/store"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// TestServerScenarios plays scenarios against a real Temporal dev server, with a
// real worker, database and client over gRPC. With RECORD_HISTORIES=1 (`make
// histories`) it also stores every run's history in workflows/testdata as a
// fixture of release histories.RewardsRelease, where
// TestReplayRecordedHistories replays it. Record after a release-worthy
// workflow change (raise the release first) and keep the old files: each is a
// version that must go on replaying.
func TestServerScenarios(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a Temporal dev server")
	}
	srv := devserver.ForTest(t, devserver.Options{})
	c := srv.Client()
	db, err := store.Open(context.Background(), dbtest.SQLite(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	w := rewardsworker.New(c, "default", rewardsact.StoreRecorder{Store: db}, worker.Options{})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	scenarios := []struct {
		name string
		play func(t *testing.T, p *player)
		// tenant is the entity's tenant; empty for the default tenant.
		tenant string
	}{
		{"continue-as-new", playContinueAsNew, ""},
		{"tiers", playTiers, ""},
		{"unenroll-burst", playUnenrollBurst, ""},
		{"reenrol", playReenroll, ""},
		{"tenant", playTenant, "t-hist"},
		{"batch", playBatch, ""},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			p := &player{t: t, ctx: ctx, c: c, rc: &rewardsclient.Client{Temporal: c, Tenant: sc.tenant}, tenant: sc.tenant, customer: "hist-" + sc.name}
			sc.play(t, p)
			if os.Getenv("RECORD_HISTORIES") == "" {
				return
			}
			p.capture()
			for i, r := range p.runs {
				fx := histories.Fixture{
					File:       histories.FileName("rewards", histories.RewardsRelease, fmt.Sprintf("%s-run%d", sc.name, i+1)),
					WorkflowID: p.workflowID(),
					Release:    histories.RewardsRelease,
					Scenario:   t.Name(),
				}
				if err := histories.Write(fixtureDir, fx, r.History); err != nil {
					t.Fatal(err)
				}
				t.Logf("wrote %s (%d events)", fx.File, len(r.History.GetEvents()))
			}
		})
	}
}

// player sends a scenario's commands to one entity, the customer's of the
// tenant (empty for the default tenant).
type player struct {
	t        *testing.T
	ctx      context.Context
	c        client.Client
	rc       *rewardsclient.Client
	tenant   string
	customer string
	runs     []histories.Run // what capture has collected, oldest first
}

// workflowID is the entity's workflow ID.
func (p *player) workflowID() string { return rewards.RewardsWorkflowIDFor(p.tenant, p.customer) }

// capture collects the histories of the entity's latest chain of runs; a
// scenario that ends an entity and starts another calls it in between.
func (p *player) capture() {
	runs, err := histories.Chain(p.ctx, p.c, p.workflowID())
	if err != nil {
		p.t.Fatal(err)
	}
	for _, r := range runs {
		if !slices.ContainsFunc(p.runs, func(have histories.Run) bool { return have.RunID == r.RunID }) {
			p.runs = append(p.runs, r)
		}
	}
}

// wait waits for the entity's latest run to end and returns its result.
func (p *player) wait() (rewards.Status, error) {
	var st rewards.Status
	err := p.c.GetWorkflow(p.ctx, p.workflowID(), "").Get(p.ctx, &st)
	return st, err
}

func (p *player) start(opts rewards.Options) {
	_, err := p.c.ExecuteWorkflow(p.ctx, client.StartWorkflowOptions{
		ID:        p.workflowID(),
		TaskQueue: rewards.RewardsTaskQueue,
	}, rewards.RewardsWorkflowType, rewards.RewardsInput{CustomerID: p.customer, TenantID: p.tenant, Options: opts})
	if err != nil {
		p.t.Fatal(err)
	}
}

func (p *player) signal(ev rewards.PointEvent) {
	if err := p.c.SignalWorkflow(p.ctx, p.workflowID(), "", rewards.SignalAddPoints, ev); err != nil {
		p.t.Fatal(err)
	}
}

// update sends apply-points with the retries every project caller uses; each
// call is a new update, as a client's own retry would be.
func (p *player) update(ev rewards.PointEvent) (rewards.PointsResult, error) {
	return p.rc.ApplyPoints(p.ctx, p.customer, ev)
}

func (p *player) unenrollAndWait() rewards.Status {
	if err := p.rc.Unenroll(p.ctx, p.customer); err != nil {
		p.t.Fatal(err)
	}
	st, err := p.wait()
	if err != nil {
		p.t.Fatal(err)
	}
	return st
}

func (p *player) status() rewards.Status {
	st, err := p.rc.Status(p.ctx, p.customer)
	if err != nil {
		p.t.Fatal(err)
	}
	return st
}

func playContinueAsNew(t *testing.T, p *player) {
	p.start(rewards.Options{EventsPerRun: 4, DedupWindow: rewards.Duration(time.Hour)})
	want := int64(0)
	for i := range 10 {
		ev := scenarioEvent(fmt.Sprint("can-", i), int64(10+i))
		if i%2 == 0 {
			p.signal(ev)
			p.signal(ev) // a redelivery
		} else {
			if _, err := p.update(ev); err != nil {
				t.Fatal(err)
			}
			res, err := p.update(ev)
			if err != nil || !res.Duplicate {
				t.Fatalf("retry of can-%d: %+v %v", i, res, err)
			}
		}
		want += int64(10 + i)
	}
	if _, err := p.update(scenarioEvent("can-1", 999)); err == nil {
		t.Fatal("a reused key with another event was accepted")
	}
	p.signal(rewards.PointEvent{Activity: "bonus", Points: 5})
	want += 5
	st := p.unenrollAndWait()
	if st.Points != want || st.Run < 3 {
		t.Fatalf("final %+v, want %d points over at least 3 runs", st, want)
	}
}

// playBatch sends events in apply-points-batch updates across ContinueAsNew
// (four events a run): each event answered on its own (applied, duplicate
// in and across batches, refused), a batch retried whole after the run
// moved on, and single updates and signals in between.
func playBatch(t *testing.T, p *player) {
	p.start(rewards.Options{EventsPerRun: 4, DedupWindow: rewards.Duration(time.Hour)})
	answers := func(evs ...rewards.PointEvent) []rewardsclient.ItemResult {
		t.Helper()
		res, err := p.rc.ApplyPointsBatch(p.ctx, p.customer, evs)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := []rewards.PointEvent{
		scenarioEvent("batch-0", 100), scenarioEvent("batch-1", 200),
		scenarioEvent("batch-0", 100),   // the same event again in the batch: a duplicate
		scenarioEvent("batch-2", -5000), // an overdraft: refused, its neighbours go on
		scenarioEvent("batch-3", 300),
	}
	res := answers(first...)
	if res[0].Err != nil || res[1].Err != nil || res[4].Err != nil || !res[2].Result.Duplicate || res[3].Err == nil {
		t.Fatalf("first batch: %+v", res)
	}
	if _, err := p.update(scenarioEvent("batch-4", 50)); err != nil {
		t.Fatal(err)
	}
	p.signal(scenarioEvent("batch-5", 25))
	res = answers(first...) // retried whole, after the run continued as new
	for i, r := range res {
		if i != 3 && (r.Err != nil || !r.Result.Duplicate) {
			t.Fatalf("retried batch, event %d: %+v, want a duplicate", i, r)
		}
	}
	res = answers(scenarioEvent("batch-6", 10), scenarioEvent("batch-1", 999), scenarioEvent("batch-7", 20))
	if res[0].Err != nil || res[1].Err == nil || res[2].Err != nil {
		t.Fatalf("batch with a reused key: %+v", res)
	}
	st := p.unenrollAndWait()
	if want := int64(100 + 200 + 300 + 50 + 25 + 10 + 20); st.Points != want || st.Run < 2 {
		t.Fatalf("final %+v, want %d points over at least 2 runs", st, want)
	}
}

func playTiers(t *testing.T, p *player) {
	p.start(rewards.Options{})
	for i, pts := range []int64{300, 300, 500, -900} {
		if _, err := p.update(scenarioEvent(fmt.Sprint("tier-", i), pts)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.update(scenarioEvent("tier-overdraft", -5000)); err == nil {
		t.Fatal("an overdraft was accepted")
	}
	p.signal(scenarioEvent("tier-zero", 0))
	if st := p.status(); st.Points != 200 || st.Tier != rewards.TierBasic {
		t.Fatalf("status %+v", st)
	}
	p.unenrollAndWait()
}

func playUnenrollBurst(t *testing.T, p *player) {
	p.start(rewards.Options{EventsPerRun: 5})
	for i := range 12 {
		p.signal(scenarioEvent(fmt.Sprint("burst-", i), 1))
	}
	st := p.unenrollAndWait()
	if st.Points != 12 || st.Enrolled {
		t.Fatalf("final %+v, want 12 points and unenrolled", st)
	}
}

// playReenroll: an unenrollment is final (a retried event starts a new run that
// refuses it and ends, its status the balance left) until the enroll update
// re-enrolls the customer; a
// payload of the wrong type is refused without harm on the way.
func playReenroll(t *testing.T, p *player) {
	p.start(rewards.Options{})
	if _, err := p.update(scenarioEvent("re-1", 10)); err != nil {
		t.Fatal(err)
	}
	if err := p.c.SignalWorkflow(p.ctx, p.workflowID(), "", rewards.SignalAddPoints,
		map[string]any{"dedup_key": "re-bad", "points": "5"}); err != nil {
		t.Fatal(err)
	}
	if st := p.unenrollAndWait(); st.Points != 10 {
		t.Fatalf("first entity ended with %+v, want 10 points", st)
	}
	p.capture()
	if _, err := p.update(scenarioEvent("re-1", 10)); !isRefusal(err, rewards.ErrNotEnrolled) {
		t.Fatalf("retry after the unenrollment: %v, want %s", err, rewards.ErrNotEnrolled)
	}
	if st, err := p.wait(); err != nil || st.Enrolled || st.Points != 10 || st.EventCount != 1 || st.DedupKeys != 0 {
		t.Fatalf("the refusing run ended with %+v, %v; want nothing applied and the balance left (10)", st, err)
	}
	p.capture()
	st, err := p.rc.Enroll(p.ctx, p.customer)
	if err != nil || !st.Enrolled || st.Points != 0 {
		t.Fatalf("enroll: %+v, %v", st, err)
	}
	if res, err := p.update(scenarioEvent("re-2", 5)); err != nil || !res.Applied {
		t.Fatalf("event after re-enrollment: %+v, %v", res, err)
	}
	if st := p.unenrollAndWait(); st.Points != 5 {
		t.Fatalf("re-enrolled entity ended with %+v, want 5 points", st)
	}
}

// playTenant: a tenant's entity (release 4) through a ContinueAsNew, tier
// changes, an unenrollment that stays final for it and a re-enrollment:
// every run carries the tenant, and so does every fact it records.
func playTenant(t *testing.T, p *player) {
	p.start(rewards.Options{EventsPerRun: 4})
	want := int64(0)
	// Signals and updates alternate, an update last, so that the status
	// below has seen every event; the redemption is an update covered by
	// the update before it, whatever the signals' timing.
	for i, pts := range []int64{300, 300, 500, -300, 40, 10} {
		ev := scenarioEvent(fmt.Sprint("tn-", i), pts)
		if i%2 == 0 {
			p.signal(ev)
		} else if _, err := p.update(ev); err != nil {
			t.Fatal(err)
		}
		want += pts
	}
	// The run continues as new once nothing is in flight (a tier change's
	// activity may still be).
	for st := p.status(); st.Run < 2; st = p.status() {
		if st.TenantID != p.tenant || st.Points != want {
			t.Fatalf("status %+v, want tenant %s with %d points", st, p.tenant, want)
		}
		select {
		case <-p.ctx.Done():
			t.Fatalf("no ContinueAsNew after %d events: %+v", st.EventCount, st)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if st := p.status(); st.TenantID != p.tenant || st.Points != want {
		t.Fatalf("status %+v after a ContinueAsNew, want tenant %s with %d points", st, p.tenant, want)
	}
	if st := p.unenrollAndWait(); st.TenantID != p.tenant || st.Points != want || st.Enrolled {
		t.Fatalf("final %+v, want tenant %s unenrolled with %d points", st, p.tenant, want)
	}
	p.capture()
	if _, err := p.update(scenarioEvent("tn-late", 10)); !isRefusal(err, rewards.ErrNotEnrolled) {
		t.Fatalf("event after the unenrollment: %v, want %s", err, rewards.ErrNotEnrolled)
	}
	if _, err := p.wait(); err != nil {
		t.Fatal(err)
	}
	p.capture()
	if st, err := p.rc.Enroll(p.ctx, p.customer); err != nil || !st.Enrolled || st.TenantID != p.tenant {
		t.Fatalf("enroll: %+v, %v", st, err)
	}
	if res, err := p.update(scenarioEvent("tn-back", 5)); err != nil || res.Points != 5 {
		t.Fatalf("event after re-enrollment: %+v, %v", res, err)
	}
	p.unenrollAndWait()
}

// scenarioEvent is a purchase event with a dedup key, as the recorded
// scenarios send it.
func scenarioEvent(key string, points int64) rewards.PointEvent {
	return rewards.PointEvent{
		DedupKey: key, Activity: "purchase", Points: points, SourceID: "order-" + key,
		OccurredAt: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC),
	}
}
