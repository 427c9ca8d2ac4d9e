package ingest_test

import (
	"context"
	"flag"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/entityflow/entityflow/internal/service/ingress"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// benchCustomers is how many entities the benchmark's events go to.
const benchCustomers = 200

// BenchmarkIngress measures point events per second from the stream to
// applied in their entities (b.N events over 200 customers, already in the
// stream when the ingress starts, the ingress with its production settings:
// 64 workers, one command in flight per customer) against the same kind
// of events sent straight through the Go client (rewardsclient.ApplyPoints)
// with the same concurrency and the same order per customer, on one dev
// server with the same in-process workers. Run with a fixed -benchtime such
// as 4000x: every iteration is one event.
func BenchmarkIngress(b *testing.B) {
	e := newEnv(b)
	e.cfg.Workers, e.cfg.MaxPerCustomer = 0, 0 // the defaults
	run := fmt.Sprint(time.Now().UnixNano())
	var round int
	// events returns b.N new events, each with the customer it goes to.
	events := func(b *testing.B) (customers []int, evs []rewards.PointEvent) {
		round++
		for i := range b.N {
			customers = append(customers, i%benchCustomers)
			evs = append(evs, rewards.PointEvent{DedupKey: fmt.Sprintf("r%d-%d", round, i), Activity: "purchase", Points: 1, SourceID: fmt.Sprint(i)})
		}
		return customers, evs
	}
	customer := func(c int) string { return fmt.Sprintf("bench-%s-%d", run, c) }
	report := func(b *testing.B) { b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s") }
	// Each customer's entity exists before either side is measured.
	var wg sync.WaitGroup
	for c := range benchCustomers {
		wg.Go(func() {
			if _, err := e.rewards.ApplyPoints(context.Background(), customer(c), rewards.PointEvent{DedupKey: "warm", Points: 1}); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()

	b.Run("via=client", func(b *testing.B) {
		customers, evs := events(b)
		workers := ingress.DefaultWorkers
		b.ResetTimer()
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i, ev := range evs {
					if customers[i]%workers != w {
						continue
					}
					if _, err := e.rewards.ApplyPoints(context.Background(), customer(customers[i]), ev); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		report(b)
	})

	b.Run("via=jetstream", func(b *testing.B) {
		customers, evs := events(b)
		if _, err := e.js.Stream(context.Background(), e.cfg.PointsStream); err != nil {
			e.startOn(e.js, nil)() // creates the streams and the durable consumer
		}
		msgs := make([]message, len(evs))
		for i, ev := range evs {
			msgs[i] = message{subject: ingress.PointsSubject(e.cfg.PointsPrefix, "default", customer(customers[i])), body: mustJSON(b, ev)}
		}
		reg, stop := applyAll(b, e, msgs)
		report(b)
		stop()
		for _, o := range []string{ingress.OutcomeDuplicate, ingress.OutcomeDeadLettered} {
			if got := counter(b, reg, "ingest_handled_total", map[string]string{"outcome": o}); got != 0 {
				b.Errorf("%v messages handled as %s, want none", got, o)
			}
		}
	})
}

// BenchmarkIngressHotCustomer measures the point events per second one
// customer's messages get from the stream to applied in its entity (b.N
// events, already in the stream when the ingress starts: a batch import),
// the customer's queued events going as apply-points-batch updates of up to
// 500 events: with the old bound of 16 messages held per customer and with
// the default (none but the consumer's MaxAckPending). Run with a fixed
// -benchtime such as 5000x.
func BenchmarkIngressHotCustomer(b *testing.B) {
	for _, perCustomer := range []int{16, 0} {
		b.Run(fmt.Sprintf("max-per-customer=%d", perCustomer), func(b *testing.B) {
			e := newEnv(b)
			e.cfg.Workers, e.cfg.MaxPerCustomer = 0, perCustomer
			customer := fmt.Sprintf("hot-%d", time.Now().UnixNano())
			if _, err := e.rewards.ApplyPoints(context.Background(), customer, rewards.PointEvent{DedupKey: "warm", Points: 1}); err != nil {
				b.Fatal(err)
			}
			e.startOn(e.js, nil)() // creates the streams and the durable consumer
			msgs := make([]message, b.N)
			for i := range msgs {
				ev := rewards.PointEvent{DedupKey: fmt.Sprint("e-", i), Activity: "purchase", Points: 1, SourceID: fmt.Sprint(i)}
				msgs[i] = message{subject: ingress.PointsSubject(e.cfg.PointsPrefix, "default", customer), body: mustJSON(b, ev)}
			}
			reg, stop := applyAll(b, e, msgs)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(counter(b, reg, "ingest_retried_total", map[string]string{"reason": "deferred"}), "deferred")
			stop()
			st, err := e.rewards.Status(context.Background(), customer)
			if err != nil {
				b.Fatal(err)
			}
			if st.EventCount != int64(b.N)+1 {
				b.Errorf("%d events applied, want %d", st.EventCount, b.N+1)
			}
		})
	}
}

// applyAll publishes msgs (the ingress's streams exist), then times an
// ingress started on them until it has applied b.N events, and returns its
// metrics and its stop.
func applyAll(b *testing.B, e *env, msgs []message) (*prometheus.Registry, func()) {
	b.Helper()
	publishBatch(b, e.js, msgs, 0)
	if b.Failed() {
		b.FailNow()
	}
	reg := prometheus.NewRegistry()
	b.ResetTimer()
	stop := e.startOn(e.js, reg)
	waitFor(b, "every event applied", 10*time.Minute, func() (bool, error) {
		return counter(b, reg, "ingest_handled_total", map[string]string{"outcome": ingress.OutcomeApplied}) >= float64(b.N), nil
	})
	b.StopTimer()
	return reg, stop
}

// BenchmarkIngressHotCustomerOpenLoop offers one customer's point events to
// a running ingress at a fixed rate (-hot-rate, 1,000 per second by
// default; b.N events in all) and reports the events per second applied
// and the 99th percentile of the lag from a message's storing in the
// stream to its ack, read from the ingress's lag histogram (so rounded up
// to a bucket's bound), beside the share acked within 500 ms. Run with a
// fixed -benchtime such as 10000x.
func BenchmarkIngressHotCustomerOpenLoop(b *testing.B) {
	e := newEnv(b)
	e.cfg.Workers, e.cfg.MaxPerCustomer = 0, 0 // the defaults
	customer := fmt.Sprintf("hot-open-%d", time.Now().UnixNano())
	if _, err := e.rewards.ApplyPoints(context.Background(), customer, rewards.PointEvent{DedupKey: "warm", Points: 1}); err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	stop := e.startOn(e.js, reg)
	defer stop()
	subject := ingress.PointsSubject(e.cfg.PointsPrefix, "default", customer)
	const tick = 10 * time.Millisecond
	perTick := max(1, int(hotRate*tick.Seconds()))
	b.ResetTimer()
	t := time.NewTicker(tick)
	for sent := 0; sent < b.N; {
		<-t.C
		for i := 0; i < perTick && sent < b.N; i++ {
			ev := rewards.PointEvent{DedupKey: fmt.Sprint("e-", sent), Activity: "purchase", Points: 1, SourceID: fmt.Sprint(sent)}
			nm := nats.NewMsg(subject)
			nm.Data = mustJSON(b, ev)
			if _, err := e.js.PublishMsgAsync(nm); err != nil {
				b.Fatalf("publishing: %v", err)
			}
			sent++
		}
	}
	t.Stop()
	waitFor(b, "every event applied", 10*time.Minute, func() (bool, error) {
		return counter(b, reg, "ingest_handled_total", map[string]string{"outcome": ingress.OutcomeApplied}) >= float64(b.N), nil
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	p99, within := lagQuantile(b, reg, 0.99, 0.5)
	b.ReportMetric(p99*1000, "p99-lag-ms")
	b.ReportMetric(within*100, "%-within-500ms")
	b.ReportMetric(counter(b, reg, "ingest_retried_total", nil), "nacks")
}

// hotRate is the open-loop benchmark's offered events per second.
var hotRate = 1000.0

func init() {
	flag.Float64Var(&hotRate, "hot-rate", hotRate, "BenchmarkIngressHotCustomerOpenLoop's offered events per second")
}

// lagQuantile returns the upper bound of the ingress lag histogram's
// bucket that holds quantile q of the points source's messages, and the
// share of them acked within limit seconds (at a bucket's bound at or
// under limit: an underestimate).
func lagQuantile(b *testing.B, reg *prometheus.Registry, q, limit float64) (bound, within float64) {
	b.Helper()
	families, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "ingest_lag_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			if !matches(m, map[string]string{"source": ingress.SourcePoints}) {
				continue
			}
			h := m.GetHistogram()
			total := float64(h.GetSampleCount())
			bound = math.Inf(1)
			for _, bk := range h.GetBucket() {
				if bk.GetUpperBound() <= limit {
					within = float64(bk.GetCumulativeCount()) / total
				}
				if math.IsInf(bound, 1) && float64(bk.GetCumulativeCount()) >= q*total {
					bound = bk.GetUpperBound()
				}
			}
			return bound, within
		}
	}
	b.Fatal("no ingest_lag_seconds of the points source")
	return 0, 0
}
