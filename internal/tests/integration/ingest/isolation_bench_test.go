package ingest_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/entityflow/entityflow/internal/service/ingress"
	"github.com/entityflow/entityflow/internal/testkit/natsserver"
	"github.com/entityflow/entityflow/internal/testkit/testenv"
)

// isolationCustomers is how many customers of each tenant the benchmark
// below publishes to, one event each per round.
const isolationCustomers = 5

// BenchmarkTenantIsolation weighs what keeping tenants apart on the bus
// costs the NATS server at 1, 10 and 100 tenants, for the arrangement the
// ingress uses (design=shared: one points stream with no duplicate window,
// sourcing the replay stream) and for the alternative of a stream per
// tenant (design=stream-per-tenant: each tenant's stream de-duplicating
// its own Nats-Msg-Ids, all sourced into the stream the ingress consumes).
// Both have the ingress's consumers (a durable per partition and the
// events durable). Each round publishes one event for each of 5 customers
// per tenant and waits until all are in the consumed stream. It reports
// the streams, the consumers, the server's resident memory and JetStream
// store after the rounds, and the time per event until consumable. Not
// in make test; make bench-isolation runs it.
func BenchmarkTenantIsolation(b *testing.B) {
	for _, tenants := range []int{1, 10, 100} {
		for _, design := range []string{"shared", "stream-per-tenant"} {
			b.Run(fmt.Sprintf("design=%s/tenants=%d", design, tenants), func(b *testing.B) {
				benchIsolation(b, design, tenants)
			})
		}
	}
}

func benchIsolation(b *testing.B, design string, tenants int) {
	testenv.Short(b, "a NATS server")
	_, err := natsserver.Binary()
	testenv.Require(b, "nats-server", err)
	srv, err := natsserver.Start(natsserver.Options{StoreDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Stop)
	js := connect(b, srv.URL)
	ctx := background(b)
	const prefix, consumed = "rewards", "REWARDS_POINTS"
	transform := &jetstream.SubjectTransformConfig{Source: prefix + ".>",
		Destination: fmt.Sprintf("%s.{{partition(%d)}}.%s.>", ingress.PartitionRoot, ingress.DefaultPartitions, prefix)}
	mustStream := func(cfg jetstream.StreamConfig) {
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			b.Fatalf("stream %s: %v", cfg.Name, err)
		}
	}
	mustStream(jetstream.StreamConfig{Name: ingress.DefaultDeadLetterStream, Subjects: []string{ingress.DefaultDeadLetterPrefix + ".>"}})
	mustStream(jetstream.StreamConfig{Name: ingress.DefaultReplayStream, Subjects: []string{ingress.DefaultReplayPrefix + ".>"}})
	mustStream(jetstream.StreamConfig{Name: ingress.DefaultEventsStream, Subjects: []string{"events.>"},
		Sources: []*jetstream.StreamSource{{Name: ingress.DefaultReplayStream, FilterSubject: ingress.DefaultReplayPrefix + ".events.>"}}})
	replays := &jetstream.StreamSource{Name: ingress.DefaultReplayStream, SubjectTransforms: []jetstream.SubjectTransformConfig{{
		Source:      ingress.DefaultReplayPrefix + "." + ingress.PartitionRoot + ".*." + prefix + ".>",
		Destination: ingress.PartitionRoot + ".{{wildcard(1)}}." + prefix + ".>",
	}}}
	switch design {
	case "shared":
		mustStream(jetstream.StreamConfig{Name: consumed, Subjects: []string{prefix + ".*.*.points"}, SubjectTransform: transform,
			Sources: []*jetstream.StreamSource{replays}})
	default:
		sources := []*jetstream.StreamSource{replays}
		for i := range tenants {
			name := "REWARDS_POINTS_T" + strconv.Itoa(i)
			tr := *transform
			tr.Source = prefix + ".t-" + strconv.Itoa(i) + ".>"
			tr.Destination = fmt.Sprintf("%s.{{partition(%d)}}.%s", ingress.PartitionRoot, ingress.DefaultPartitions, tr.Source)
			mustStream(jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ".t-" + strconv.Itoa(i) + ".*.points"}, SubjectTransform: &tr})
			sources = append(sources, &jetstream.StreamSource{Name: name})
		}
		mustStream(jetstream.StreamConfig{Name: consumed, Sources: sources})
	}
	for p := range ingress.DefaultPartitions {
		if _, err := js.CreateOrUpdateConsumer(ctx, consumed, jetstream.ConsumerConfig{
			Durable: "ingest-points-" + strconv.Itoa(p), AckPolicy: jetstream.AckExplicitPolicy,
			FilterSubject:  ingress.PartitionRoot + "." + strconv.Itoa(p) + "." + prefix + ".>",
			PriorityPolicy: jetstream.PriorityPolicyPinned, PriorityGroups: []string{"ingest"}, PinnedTTL: 10 * time.Second,
		}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, ingress.DefaultEventsStream, jetstream.ConsumerConfig{Durable: "ingest-events", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		b.Fatal(err)
	}

	st, err := js.Stream(ctx, consumed)
	if err != nil {
		b.Fatal(err)
	}
	var want uint64
	events := 0
	round := 0
	for b.Loop() {
		round++
		var futures []jetstream.PubAckFuture
		for i := range tenants {
			for c := range isolationCustomers {
				m := nats.NewMsg(ingress.PointsSubject(prefix, "t-"+strconv.Itoa(i), "c-"+strconv.Itoa(c)))
				m.Data = []byte(`{"points":1}`)
				// The same order numbers in every tenant.
				m.Header.Set(nats.MsgIdHdr, "order-"+strconv.Itoa(round)+"-"+strconv.Itoa(c))
				f, err := js.PublishMsgAsync(m)
				if err != nil {
					b.Fatal(err)
				}
				futures = append(futures, f)
			}
		}
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				b.Fatal(err)
			}
		}
		want += uint64(len(futures))
		events += len(futures)
		deadline := time.Now().Add(30 * time.Second)
		for {
			info, err := st.Info(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if info.State.Msgs >= want {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("stream %s holds %d messages, want %d", consumed, info.State.Msgs, want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	b.StopTimer()
	acct, err := js.AccountInfo(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	rss, err := srv.RSS()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(acct.Streams), "streams")
	b.ReportMetric(float64(acct.Consumers), "consumers")
	b.ReportMetric(float64(rss)/(1<<20), "server-rss-MiB")
	b.ReportMetric(float64(acct.Store)/(1<<10), "store-KiB")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(events), "µs/event")
	b.ReportMetric(0, "ns/op")
}
