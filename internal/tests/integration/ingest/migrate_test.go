package ingest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/entityflow/entityflow/internal/service/ingress"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// A points stream of an earlier release (no subject transform, one durable
// consumer that an earlier ingress left with messages unconsumed) is
// partitioned by the first ingress of this one: the messages published
// before are drained first, in order, through the earlier durable, which is
// then deleted; the messages published after are stored partitioned (under
// the subject PartitionOf computes, as nats-server does) and applied after
// them. An ingress configured for another number of partitions is refused.
func TestIngressPartitionsAnEarlierStream(t *testing.T) {
	e := newEnv(t)
	e.cfg.Partitions = 3
	ctx := background(t)
	if _, err := e.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: e.cfg.PointsStream, Subjects: []string{e.cfg.PointsPrefix + ".>"}, Storage: jetstream.FileStorage,
	}); err != nil {
		t.Fatal(err)
	}
	old, err := e.js.CreateOrUpdateConsumer(ctx, e.cfg.PointsStream, jetstream.ConsumerConfig{
		Durable: e.cfg.PointsDurable, AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: e.cfg.PointsPrefix + ".>",
	})
	if err != nil {
		t.Fatal(err)
	}
	const custs, before, after = 4, 10, 10
	customer := func(c int) string { return fmt.Sprintf("m-%d", c) }
	event := func(c, i int) rewards.PointEvent {
		return rewards.PointEvent{DedupKey: fmt.Sprintf("%d-%d", c, i), Activity: "purchase", Points: int64(i + 1), SourceID: fmt.Sprint(i)}
	}
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			for c := range custs {
				e.publish(ingress.PointsSubject(e.cfg.PointsPrefix, "default", customer(c)), mustJSON(t, event(c, i)), "")
			}
		}
	}
	publish(0, before)
	// The earlier ingress handled the first three events of each customer.
	batch, err := old.Fetch(3 * custs)
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		var ev rewards.PointEvent
		if err := json.Unmarshal(m.Data(), &ev); err != nil {
			t.Fatal(err)
		}
		_, cust, err := ingress.ParsePointsSubject(e.cfg.PointsPrefix, m.Subject())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.rewards.ApplyPoints(ctx, cust, ev); err != nil {
			t.Fatal(err)
		}
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}

	reg := prometheus.NewRegistry()
	e.start(reg)
	publish(before, before+after)
	for c := range custs { // redeem everything: refused unless every earlier event came first
		sum := int64(0)
		for i := range before + after {
			sum += event(c, i).Points
		}
		ev := rewards.PointEvent{DedupKey: fmt.Sprintf("%d-redeem", c), Activity: "redeem", Points: -sum, SourceID: "redeem"}
		e.publish(ingress.PointsSubject(e.cfg.PointsPrefix, "default", customer(c)), mustJSON(t, ev), "")
	}
	want := (before+after+1)*custs - 3*custs
	waitFor(t, "every message handled", 3*time.Minute, func() (bool, error) {
		return counter(t, reg, "ingest_handled_total", map[string]string{"source": ingress.SourcePoints}) >= float64(want), nil
	})

	var order []string
	for i := range before + after {
		order = append(order, fmt.Sprint(i))
	}
	order = append(order, "redeem")
	for c := range custs {
		st, err := e.rewards.Status(ctx, customer(c))
		if err != nil {
			t.Fatal(err)
		}
		if st.Points != 0 || st.EventCount != int64(before+after+1) {
			t.Errorf("%s: %d points, %d events; want 0, %d", customer(c), st.Points, st.EventCount, before+after+1)
		}
		if got := appliedSources(t, ctx, e.c, rewards.RewardsWorkflowID(customer(c))); !slices.Equal(got, order) {
			t.Errorf("%s: applied in the order %v, want %v", customer(c), got, order)
		}
	}
	if _, err := e.js.Consumer(ctx, e.cfg.PointsStream, e.cfg.PointsDurable); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Errorf("the earlier durable after the drain: %v, want it deleted", err)
	}
	stream, err := e.js.Stream(ctx, e.cfg.PointsStream)
	if err != nil {
		t.Fatal(err)
	}
	subject := ingress.PointsSubject(e.cfg.PointsPrefix, "default", customer(0))
	if _, err := stream.GetLastMsgForSubject(ctx, ingress.StoredPointsSubject(subject, 3)); err != nil {
		t.Errorf("no message stored under %s (PartitionOf against nats-server's partition(3)): %v", ingress.StoredPointsSubject(subject, 3), err)
	}
	if dl := e.deadLetters(); len(dl) != 0 {
		t.Errorf("%d dead letters, want none; the first: %v", len(dl), dl[0].Headers())
	}

	// Another number of partitions on this stream is refused.
	other := &ingress.Ingress{Config: e.cfg, JS: e.js, Rewards: e.rewards, Logger: quietLogger(t)}
	other.Config.Partitions = 4
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := other.Run(rctx); err == nil || !strings.Contains(err.Error(), "in 3 partitions, not 4") {
		t.Errorf("an ingress of 4 partitions on a stream of 3: %v, want refused", err)
	}
}
