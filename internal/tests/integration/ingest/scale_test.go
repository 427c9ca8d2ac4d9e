package ingest_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/entityflow/entityflow/internal/service/ingress"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/internal/testkit/cluster"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
	"github.com/entityflow/entityflow/internal/testkit/testenv"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// Two ingress processes share the points stream while the workload (the
// 10,000-event mix and one customer's 200 ordered messages) is published,
// its second copies over about a minute; meanwhile they are replaced one
// at a time, as a rolling deploy of -ingest workers does: a third process
// is started and, once it holds partitions, the first is stopped (SIGTERM:
// it gives its partitions up at once); then a fourth, and the second is
// stopped. Every entity ends with exactly its distinct events, applied in
// the order published; the dead-letter stream holds the poison messages
// only.
func TestIngressRollingReplacement(t *testing.T) {
	url, js := natsJetStream(t)
	srv := devserver.ForTest(t, devserver.Options{})
	e := &env{t: t, natsURL: url, js: js, cfg: testConfig()}
	e.deleteStreamsAtEnd()
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	c := srv.Client()
	rc := &rewardsclient.Client{Temporal: c, Logger: quietLogger(t)}
	f := newFleet(t, e, srv.FrontendHostPort(), testLoad...)
	unenrollGone(t, ctx, c, rc)

	old := []*ingressProc{f.start("a"), f.start("b")}
	w := newWorkload(t, e.cfg.PointsPrefix, rollingPerCustomer)
	total := w.total()
	published := make(chan struct{})
	began := time.Now()
	go func() {
		defer close(published)
		w.publishAll(t, e, 150)
	}()
	for i, p := range old {
		waitFor(t, fmt.Sprintf("%d%% of the messages handled", 20*(i+1)), 5*time.Minute, func() (bool, error) {
			return f.handled() >= float64(total*(i+1)/5), nil
		})
		next := f.start(fmt.Sprintf("new-%d", i+1))
		waitFor(t, next.name+" holding partitions", 2*time.Minute, func() (bool, error) { return next.partitionsHeld() >= 1, nil })
		stopping := time.Now()
		p.Signal(syscall.SIGTERM)
		t.Logf("%v: %s started and holding %v partitions; %s stopped in %v; %v of %d messages handled",
			time.Since(began).Round(time.Second), next.name, next.partitionsHeld(), p.name, time.Since(stopping).Round(time.Millisecond), f.handled(), total)
	}
	<-published
	t.Logf("published %d messages in %v", total, time.Since(began).Round(time.Millisecond))
	waitFor(t, "the backlog drained", 6*time.Minute, func() (bool, error) {
		pending, unacked := e.backlog(ctx)
		return pending == 0 && unacked == 0, nil
	})
	t.Logf("drained %v after the first publish (%.0f messages/s)", time.Since(began).Round(time.Millisecond), float64(total)/time.Since(began).Seconds())
	w.check(t, ctx, e, c, rc)
}

// BenchmarkIngressProcesses measures point events per second from the
// stream to applied with 1, 2 and 3 ingress processes (worker -task-queues
// none -ingest, with the production settings but for a 5 s ack wait and a
// 2 s pin TTL) sharing the points stream's 8 partitions: b.N events over 200
// customers (entities created first), published once the processes run,
// each process's share of the partitions found at the start. Every
// sub-benchmark ends with every customer's balance checked exact.
//
// By default it runs on one dev server (in memory) with one rewards worker
// process. With INGEST_BENCH_SERVER=split it runs on the production shape
// (`make bench-replicas`): temporal-server as separate services on
// PostgreSQL (cluster.ForTestSplit: frontend, matching, two history hosts,
// 16 shards) and three rewards worker processes on one PostgreSQL database;
// then procs=3/kill=worker SIGKILLs one of the three workers once half the
// events are applied, and the other two take its entities over. Run with a
// fixed -benchtime such as 4000x: every iteration is one event.
func BenchmarkIngressProcesses(b *testing.B) {
	url, js := natsJetStream(b)
	bin := testenv.BuildProgram(b, testenv.WorkerPackage)
	var c client.Client
	var workers []*testenv.Process
	var address, workerDB string
	switch server := os.Getenv("INGEST_BENCH_SERVER"); server {
	case "", "dev":
		srv := devserver.ForTest(b, devserver.Options{})
		address, c = srv.FrontendHostPort(), srv.Client()
		workerDB = "sqlite://" + filepath.Join(b.TempDir(), "entities.db")
		workers = startWorkers(b, bin, address, workerDB, 1)
	case "split":
		srv := cluster.ForTestSplit(b)
		address = srv.Address
		var err error
		if c, err = client.Dial(client.Options{HostPort: address, Namespace: srv.Namespace, Logger: sdklog.NewStructuredLogger(quietLogger(b))}); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Close)
		workerDB = dbtest.Postgres(b).URL
		workers = startWorkers(b, bin, address, workerDB, 3)
	default:
		b.Fatalf("INGEST_BENCH_SERVER=%q: want dev or split", server)
	}
	rc := &rewardsclient.Client{Temporal: c, Logger: quietLogger(b)}
	run := fmt.Sprint(time.Now().UnixNano())
	customer := func(c int) string { return fmt.Sprintf("bench-%s-%d", run, c) }
	want := make([]int64, benchCustomers)
	for c := range benchCustomers {
		if _, err := rc.ApplyPoints(context.Background(), customer(c), rewards.PointEvent{DedupKey: "warm", Points: 1}); err != nil {
			b.Fatal(err)
		}
		want[c] = 1
	}
	type step struct {
		procs      int
		killWorker bool
	}
	steps := []step{{procs: 1}, {procs: 2}, {procs: 3}}
	if len(workers) > 1 {
		steps = append(steps, step{procs: 3, killWorker: true})
	}
	round := 0
	for _, st := range steps {
		name := fmt.Sprintf("procs=%d", st.procs)
		if st.killWorker {
			name += "/kill=worker"
		}
		b.Run(name, func(b *testing.B) {
			round++
			e := &env{t: b, natsURL: url, js: js, cfg: testConfig()}
			e.deleteStreamsAtEnd()
			f := ingressFleet(b, e, address, bin, "-log-level", "error")
			var running []*ingressProc
			for i := range st.procs {
				running = append(running, f.start(fmt.Sprint("p", i)))
			}
			waitFor(b, "every process counted", time.Minute, func() (bool, error) {
				kv, err := js.KeyValue(context.Background(), e.membersBucket())
				if err != nil {
					return false, nil
				}
				keys, err := kv.Keys(context.Background())
				return err == nil && len(keys) == st.procs, nil
			})
			msgs := make([]message, b.N)
			for i := range b.N {
				ev := rewards.PointEvent{DedupKey: fmt.Sprintf("r%d-%d", round, i), Activity: "purchase", Points: 1, SourceID: fmt.Sprint(i)}
				msgs[i] = message{subject: ingress.PointsSubject(e.cfg.PointsPrefix, "default", customer(i%benchCustomers)), body: mustJSON(b, ev)}
				want[i%benchCustomers]++
			}
			b.ResetTimer()
			publishBatch(b, js, msgs, 0)
			if st.killWorker {
				waitFor(b, "half the events applied", 10*time.Minute, func() (bool, error) {
					return f.handled() >= float64(b.N/2), nil
				})
				workers[0].Signal(syscall.SIGKILL)
				workers = workers[1:]
			}
			// A message handled twice (its ack lost, then redelivered and
			// answered as a duplicate) counts twice among the handled: the
			// step ends once the stream has nothing pending or unacked too.
			waitFor(b, "every event applied", 10*time.Minute, func() (bool, error) {
				if f.handled() < float64(b.N) {
					return false, nil
				}
				pending, unacked := e.backlog(context.Background())
				return pending == 0 && unacked == 0, nil
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			for _, p := range running {
				p.Signal(syscall.SIGTERM)
			}
			checkBalances(b, rc, customer, want)
			if st.killWorker {
				// The next count starts with three workers again.
				workers = append(workers, startWorkers(b, bin, address, workerDB, 1)...)
			}
		})
	}
}

// checkBalances fails b unless customer(i)'s entity holds want[i] points,
// for every i.
func checkBalances(b *testing.B, rc *rewardsclient.Client, customer func(int) string, want []int64) {
	b.Helper()
	for i, points := range want {
		st, err := rc.Status(context.Background(), customer(i))
		if err != nil {
			b.Fatalf("status of %s: %v", customer(i), err)
		}
		if st.Points != points {
			b.Errorf("%s: %d points, want %d", customer(i), st.Points, points)
		}
	}
}
