package integration_test

import (
	"context"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/entityflow/entityflow/internal/cluster"
	"github.com/entityflow/entityflow/internal/dbtest"
	"github.com/entityflow/entityflow/workflows"
)

// On a real Temporal server on PostgreSQL, three worker processes sharing one
// database serve entities under traffic while each is replaced in turn: two
// stopped gracefully (SIGTERM), one killed (SIGKILL); then the server itself
// is restarted under traffic. Every entity ends with exactly the points of
// its distinct events, every retry got the first answer, and no entity is
// stuck.
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
	rc := newClient(c, workflows.Options{EventsPerRun: 40})
	suffix := fmt.Sprint(time.Now().UnixNano())
	customers := []string{"roll-a-" + suffix, "roll-b-" + suffix, "roll-c-" + suffix}

	workers := make([]*workerProc, 3)
	for i := range workers {
		workers[i] = &workerProc{cmd: startWorkerProcess(t, workerBin, srv.Address, db)}
	}

	type result struct {
		want    map[string]int64
		answers []map[int][]workflows.PointsResult
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
	for i, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGTERM, syscall.SIGKILL} {
		time.Sleep(time.Second)
		workers[i].stop(t, sig)
		workers[i] = &workerProc{cmd: startWorkerProcess(t, workerBin, srv.Address, db)}
	}
	r := <-first
	check(r)

	second := make(chan result, 1)
	go func() { second <- traffic(100, 160) }() // 100..119 were sent before: duplicates
	time.Sleep(time.Second)
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	r2 := <-second
	check(r2)
	for _, cu := range customers {
		want := r.want[cu] + r2.want[cu] - sumPoints(100, 120)
		if st := status(t, ctx, rc, cu); st.Points != want || st.EventCount != 160 {
			t.Fatalf("%s: status %+v, want %d points from 160 distinct events", cu, st, want)
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
