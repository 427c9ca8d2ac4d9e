package ingest_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/entityflow/entityflow/internal/service/ingress"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
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
	f := newFleet(t, e, srv, testLoad...)
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
		p.signal(syscall.SIGTERM)
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
// each process's share of the partitions found at the start; one dev server
// (in memory) and one rewards worker process for all. Run with a fixed
// -benchtime such as 4000x: every iteration is one event.
func BenchmarkIngressProcesses(b *testing.B) {
	url, js := natsJetStream(b)
	srv := devserver.ForTest(b, devserver.Options{})
	e := &env{t: b, natsURL: url, js: js, cfg: testConfig()}
	f := newFleet(b, e, srv)
	bin := f.bin
	rc := &rewardsclient.Client{Temporal: srv.Client(), Logger: quietLogger(b)}
	run := fmt.Sprint(time.Now().UnixNano())
	customer := func(c int) string { return fmt.Sprintf("bench-%s-%d", run, c) }
	for c := range benchCustomers {
		if _, err := rc.ApplyPoints(context.Background(), customer(c), rewards.PointEvent{DedupKey: "warm", Points: 1}); err != nil {
			b.Fatal(err)
		}
	}
	round := 0
	for _, procs := range []int{1, 2, 3} {
		b.Run(fmt.Sprintf("procs=%d", procs), func(b *testing.B) {
			round++
			e := &env{t: b, natsURL: url, js: js, cfg: testConfig()}
			e.deleteStreamsAtEnd()
			f := ingressFleet(b, e, srv, bin, "-log-level", "error")
			var running []*ingressProc
			for i := range procs {
				running = append(running, f.start(fmt.Sprint("p", i)))
			}
			waitFor(b, "every process counted", time.Minute, func() (bool, error) {
				kv, err := js.KeyValue(context.Background(), e.membersBucket())
				if err != nil {
					return false, nil
				}
				keys, err := kv.Keys(context.Background())
				return err == nil && len(keys) == procs, nil
			})
			msgs := make([]message, b.N)
			for i := range b.N {
				ev := rewards.PointEvent{DedupKey: fmt.Sprintf("r%d-%d", round, i), Activity: "purchase", Points: 1, SourceID: fmt.Sprint(i)}
				msgs[i] = message{subject: ingress.PointsSubject(e.cfg.PointsPrefix, "default", customer(i%benchCustomers)), body: mustJSON(b, ev)}
			}
			b.ResetTimer()
			publishBatch(b, js, msgs, 0)
			waitFor(b, "every event applied", 10*time.Minute, func() (bool, error) {
				return f.handled() >= float64(b.N), nil
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			for _, p := range running {
				p.signal(syscall.SIGTERM)
			}
		})
	}
}
