package integration_test

import (
	"context"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/service/platform"
	"github.com/entityflow/entityflow/internal/testkit/cluster"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/store"
	platformwf "github.com/entityflow/entityflow/workflows/platform"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// On a real Temporal server on PostgreSQL, three worker processes sharing one
// database serve entities and the activity platform under traffic while each
// is replaced in turn: two stopped gracefully (SIGTERM), one killed
// (SIGKILL); then the server itself is restarted under traffic. Every entity
// ends with exactly the points of its distinct events, every retry got the
// first answer, no entity is stuck, and every event delivered twice made
// exactly one run row with one row per task, all succeeded.
func TestRealServerRollingRestartsKeepTotalsExact(t *testing.T) {
	srv := cluster.ForTest(t)
	db := dbtest.Postgres(t).URL
	workerBin := buildWorker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	c, err := client.Dial(client.Options{HostPort: srv.Address, Namespace: srv.Namespace, Logger: log.NewStructuredLogger(quietLogger(t))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc := newClient(c, rewards.Options{EventsPerRun: 40})
	suffix := fmt.Sprint(time.Now().UnixNano())
	customers := []string{"roll-a-" + suffix, "roll-b-" + suffix, "roll-c-" + suffix}

	st, err := store.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	svc := &platform.Service{Store: st, Temporal: c, Logger: quietLogger(t)}
	def := contracts.ActivityDefinition{
		ActivityID: uuid.NewString(), TenantID: "t-roll", Name: "on-roll",
		Trigger:           contracts.Trigger{Type: contracts.TriggerEvent, Event: &contracts.EventTrigger{EventTypes: []string{"roll.happened"}}},
		DedupeKeyStrategy: contracts.DedupeByEventID,
		Tasks:             []contracts.TaskSpec{{TaskType: "noop", Count: 2}},
	}
	if _, err := svc.Define(ctx, def); err != nil {
		t.Fatal(err)
	}
	const events = 60
	// deliver sends events from..to-1 of the platform, each twice.
	deliver := func(from, to int) error {
		for i := from; i < to; i++ {
			env := contracts.EventEnvelope{EventID: fmt.Sprint("roll-", suffix, "-", i), EventType: "roll.happened",
				Source: "test", TenantID: "t-roll", OccurredAt: time.Now().UTC()}
			for range 2 {
				if _, err := svc.Deliver(ctx, env); err != nil {
					return fmt.Errorf("event %d: %w", i, err)
				}
			}
		}
		return nil
	}

	workers := make([]*workerProc, 3)
	for i := range workers {
		workers[i] = &workerProc{cmd: startWorkerProcess(t, workerBin, srv.Address, db)}
	}

	type result struct {
		want    map[string]int64
		answers []map[int][]rewards.PointsResult
		err     error
	}
	// traffic sends events from..to-1 to every customer, each three times.
	traffic := func(from, to int) result {
		var mu sync.Mutex
		r := result{want: map[string]int64{}}
		var wg sync.WaitGroup
		for _, cu := range customers {
			wg.Go(func() {
				answers, sum, err := sendTriplicates(ctx, rc, cu, from, to-from)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					r.err = fmt.Errorf("%s: %w", cu, err)
					return
				}
				r.want[cu] = sum
				r.answers = append(r.answers, answers)
			})
		}
		wg.Wait()
		return r
	}
	check := func(r result) {
		t.Helper()
		if r.err != nil {
			t.Fatal(r.err)
		}
		for _, answers := range r.answers {
			checkAnswers(t, answers)
		}
	}
	first := make(chan result, 1)
	go func() { first <- traffic(0, 120) }()
	delivered := make(chan error, 1)
	go func() { delivered <- deliver(0, events/2) }()
	for i, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGTERM, syscall.SIGKILL} {
		time.Sleep(time.Second)
		workers[i].stop(t, sig)
		workers[i] = &workerProc{cmd: startWorkerProcess(t, workerBin, srv.Address, db)}
	}
	r := <-first
	check(r)
	if err := <-delivered; err != nil {
		t.Fatal(err)
	}

	second := make(chan result, 1)
	go func() { second <- traffic(100, 160) }()               // 100..119 were sent before: duplicates
	go func() { delivered <- deliver(events/2-10, events) }() // 10 again
	time.Sleep(time.Second)
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	r2 := <-second
	check(r2)
	if err := <-delivered; err != nil {
		t.Fatal(err)
	}
	for _, cu := range customers {
		want := r.want[cu] + r2.want[cu] - sumPoints(100, 120)
		if st := status(t, ctx, rc, cu); st.Points != want || st.EventCount != 160 {
			t.Fatalf("%s: status %+v, want %d points from 160 distinct events", cu, st, want)
		}
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		runs, err := st.ListRuns(ctx, def.ActivityID)
		if err != nil {
			t.Fatal(err)
		}
		done := 0
		for _, run := range runs {
			_, tasks, err := st.GetRun(ctx, run.RunID)
			if err != nil {
				t.Fatal(err)
			}
			if run.Status == platformwf.StatusSucceeded && len(tasks) == 2 &&
				tasks[0].Status == platformwf.StatusSucceeded && tasks[1].Status == platformwf.StatusSucceeded {
				done++
			}
		}
		if len(runs) > events {
			t.Fatalf("%d run rows for %d events", len(runs), events)
		}
		if done == events {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d runs finished with both tasks (%d rows)", done, events, len(runs))
		}
	}
}

// workerProc is a worker program the test runs.
type workerProc struct{ cmd *exec.Cmd }

// stop sends sig to the worker and waits for it to exit: SIGTERM lets its
// in-flight tasks finish, SIGKILL is a crash.
func (w *workerProc) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := w.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	_ = w.cmd.Wait()
}
