// Package ingest_test runs the JetStream ingress against real NATS servers
// (bin/nats-server, one of each test's own: natsserver.ForTest) and a
// Temporal dev server with real rewards and platform workers.
package ingest_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	platformact "github.com/entityflow/entityflow/activities/platform"
	rewardsact "github.com/entityflow/entityflow/activities/rewards"
	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/service/ingress"
	"github.com/entityflow/entityflow/internal/service/platform"
	"github.com/entityflow/entityflow/internal/service/platformworker"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/internal/service/rewardsworker"
	"github.com/entityflow/entityflow/internal/testkit/cluster"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
	"github.com/entityflow/entityflow/internal/testkit/natsserver"
	"github.com/entityflow/entityflow/store"
	platformwf "github.com/entityflow/entityflow/workflows/platform"
	"github.com/entityflow/entityflow/workflows/rewards"
)

func quietLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))
}

// server picks the Temporal server of newEnv: the dev server (default)
// or, with -ingest-server cluster, temporal-server on PostgreSQL
// (internal/testkit/cluster), for figures on the real server.
var server = flag.String("ingest-server", "dev", "the Temporal server of the tests and benchmarks: dev (the CLI's dev server, in memory) or cluster (temporal-server on PostgreSQL)")

// temporalForTest starts the Temporal server -ingest-server names for t
// and returns a client of it and its frontend's address.
func temporalForTest(t testing.TB) (client.Client, string) {
	t.Helper()
	if *server != "cluster" {
		srv := devserver.ForTest(t, devserver.Options{})
		return srv.Client(), srv.FrontendHostPort()
	}
	srv := cluster.ForTest(t)
	c, err := client.Dial(client.Options{HostPort: srv.Address, Namespace: srv.Namespace, Logger: sdklog.NewStructuredLogger(quietLogger(t))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, srv.Address
}

// natsJetStream starts a NATS server of the test's own (skipping the test
// without bin/nats-server, failing it under REQUIRE_SERVICES) and connects.
func natsJetStream(t testing.TB) (url string, js jetstream.JetStream) {
	t.Helper()
	srv := natsserver.ForTest(t)
	return srv.URL, connect(t, srv.URL)
}

// connect opens a JetStream client on the server at url until the test ends.
func connect(t testing.TB, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.Timeout(3*time.Second), nats.Name("entityflow ingest test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// env is one test's world: NATS streams of its own (names and subjects
// prefixed with a random ID, deleted at the end), a dev server, the
// project's workers on a SQLite database, and the platform service.
type env struct {
	t        testing.TB
	natsURL  string
	js       jetstream.JetStream
	c        client.Client
	store    *store.Store
	platform *platform.Service
	rewards  *rewardsclient.Client
	cfg      ingress.Config
	// frontend is the dev server's address.
	frontend string
	// logger is the ingress's; nil: errors only, to the test's output.
	logger *slog.Logger
}

func newEnv(t testing.TB) *env {
	t.Helper()
	url, js := natsJetStream(t)
	c, frontend := temporalForTest(t)
	ctx := background(t)
	st, err := store.Open(ctx, dbtest.SQLite(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rw := rewardsworker.New(c, "default", rewardsact.StoreRecorder{Store: st}, worker.Options{})
	pw := platformworker.New(c, &platformact.Platform{Store: st, Temporal: c, Handlers: platformact.DefaultTaskHandlers()}, worker.Options{})
	for _, w := range []worker.Worker{rw, pw} {
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
	}
	e := &env{
		t: t, natsURL: url, js: js, c: c, store: st, cfg: testConfig(), frontend: frontend,
		platform: &platform.Service{Store: st, Temporal: c, Logger: quietLogger(t)},
		rewards:  &rewardsclient.Client{Temporal: c, Attempts: 5, MaxBackoff: time.Second, AttemptTimeout: 10 * time.Second, Logger: quietLogger(t)},
	}
	e.deleteStreamsAtEnd()
	return e
}

// testConfig is an ingress configuration of streams and subjects of the
// test's own (names prefixed with a random ID).
func testConfig() ingress.Config {
	var raw [4]byte
	_, _ = rand.Read(raw[:])
	id := "it" + hex.EncodeToString(raw[:])
	up := strings.ToUpper(id)
	return ingress.Config{
		PointsStream: up + "_POINTS", PointsPrefix: id + ".rewards", PointsDurable: "ingest-points",
		EventsStream: up + "_EVENTS", EventsPrefix: id + ".events", EventsDurable: "ingest-events",
		DeadLetterStream: up + "_DEAD", DeadLetterPrefix: id + ".dead",
		ReplayStream: up + "_REPLAYS", ReplayPrefix: id + ".replay",
		// A short duplicate window for replays, so that a replay run again
		// after it is stored again: the dedup key is all that is left.
		StreamDuplicates: time.Second,
		Workers:          16,
		// A low bound per customer, so that customers are deferred and
		// their messages come back by JetStream's redelivery: the
		// redemptions check that none overtook another.
		MaxPerCustomer: 4,
		Retry:          ingress.RetryPolicy{Base: 200 * time.Millisecond, Max: 2 * time.Second, MaxDeliveries: 20},
		Tenants:        []string{"default", "t-1", "t-2"},
		LagInterval:    time.Second,
		// A dead process's partitions pass on soon.
		PinnedTTL: 2 * time.Second,
	}
}

// deleteStreamsAtEnd deletes the test's streams when it ends.
func (e *env) deleteStreamsAtEnd() {
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, s := range []string{e.cfg.PointsStream, e.cfg.EventsStream, e.cfg.DeadLetterStream, e.cfg.ReplayStream, "KV_" + e.membersBucket()} {
			_ = e.js.DeleteStream(ctx, s)
		}
	})
}

// membersBucket is the key-value bucket of the ingress processes sharing
// the test's points stream.
func (e *env) membersBucket() string {
	return e.cfg.PointsStream + "_" + e.cfg.PointsDurable + "_members"
}

func background(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// start runs an ingress until the test ends; its metrics go to reg.
func (e *env) start(reg prometheus.Registerer) {
	e.t.Helper()
	stop := e.startOn(e.js, reg)
	e.t.Cleanup(stop)
}

// startOn runs an ingress on js until stop is called; its metrics go to reg.
func (e *env) startOn(js jetstream.JetStream, reg prometheus.Registerer) (stop func()) {
	e.t.Helper()
	logger := e.logger
	if logger == nil {
		logger = quietLogger(e.t)
	}
	in := &ingress.Ingress{
		Config: e.cfg, JS: js, Rewards: e.rewards, Platform: e.platform,
		Metrics: ingress.NewMetrics(reg), Logger: logger,
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				e.t.Errorf("ingress: %v", err)
			}
		})
	}
	// Run creates the streams; wait for them before publishing.
	waitFor(e.t, "the ingress's streams", 30*time.Second, func() (bool, error) {
		for _, s := range []string{e.cfg.PointsStream, e.cfg.EventsStream, e.cfg.DeadLetterStream, e.cfg.ReplayStream} {
			if _, err := e.js.Stream(context.Background(), s); err != nil {
				return false, nil
			}
		}
		return true, nil
	})
	return stop
}

// publish stores one message and fails the test unless JetStream stored it
// (not dropped as a duplicate).
func (e *env) publish(subject string, body []byte, msgID string) {
	e.t.Helper()
	m := nats.NewMsg(subject)
	m.Data = body
	if msgID != "" {
		m.Header.Set(nats.MsgIdHdr, msgID)
	}
	ack, err := e.js.PublishMsg(background(e.t), m)
	if err != nil {
		e.t.Fatalf("publishing on %s: %v", subject, err)
	}
	if ack.Duplicate {
		e.t.Fatalf("publishing on %s (Nats-Msg-Id %q): JetStream dropped it as a duplicate", subject, msgID)
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// counter sums the counters of reg named name whose labels include those
// given (0 when there are none).
func counter(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return sum(families, name, labels)
}

// sum adds up the counters and gauges of families named name whose labels
// include those given.
func sum(families []*dto.MetricFamily, name string, labels map[string]string) float64 {
	var total float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if matches(m, labels) {
				total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return total
}

func matches(m *dto.Metric, labels map[string]string) bool {
	got := map[string]string{}
	for _, l := range m.GetLabel() {
		got[l.GetName()] = l.GetValue()
	}
	for k, v := range labels {
		if got[k] != v {
			return false
		}
	}
	return true
}

func waitFor(t testing.TB, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// deadLetters reads every message of the dead-letter stream.
func (e *env) deadLetters() []jetstream.Msg {
	e.t.Helper()
	ctx := background(e.t)
	cons, err := e.js.OrderedConsumer(ctx, e.cfg.DeadLetterStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []jetstream.Msg
	for {
		batch, err := cons.FetchNoWait(100)
		if err != nil {
			e.t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			out = append(out, m)
			n++
		}
		if n == 0 {
			return out
		}
	}
}

const (
	customers         = 20
	eventsPerCustomer = 15
	envelopes         = 30
	silentEnvelopes   = 5
)

// A few hundred point events over 20 customers of three tenants, and event
// envelopes, each published twice (the second copy after JetStream's
// duplicate window, with the same Nats-Msg-Id or, for events with their own
// key, another one), plus poison messages: every entity ends with exactly
// its distinct events (each customer's last event redeems its whole balance,
// which only an in-order delivery can apply), every subscribed envelope
// started exactly one run with one row, the metrics count each copy once as
// applied and once as a duplicate, and the dead-letter stream holds the
// poison messages only, each with its reason.
func TestIngressExactlyOnceEffect(t *testing.T) {
	e := newEnv(t)
	ctx := background(t)
	reg := prometheus.NewRegistry()

	def := contracts.ActivityDefinition{
		ActivityID: uuid.NewString(), TenantID: "t-1", Name: "on-order",
		Trigger:           contracts.Trigger{Type: contracts.TriggerEvent, Event: &contracts.EventTrigger{EventTypes: []string{"order.created"}}},
		DedupeKeyStrategy: contracts.DedupeByEventID,
		Tasks:             []contracts.TaskSpec{{TaskType: "noop", Count: 1}},
	}
	if _, err := e.platform.Define(ctx, def); err != nil {
		t.Fatal(err)
	}
	// A customer who unenrolled before the stream reaches them.
	gone := e.rewards.For("default")
	if _, err := gone.ApplyPoints(ctx, "gone", rewards.PointEvent{DedupKey: "g-1", Points: 5}); err != nil {
		t.Fatal(err)
	}
	if err := gone.Unenroll(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if err := e.c.GetWorkflow(ctx, rewards.RewardsWorkflowID("gone"), "").Get(ctx, nil); err != nil {
		t.Fatal(err)
	}

	e.start(reg)

	tenantOf := func(c int) string {
		if c%4 == 0 {
			return "t-2"
		}
		return "default"
	}
	customer := func(c int) string { return fmt.Sprintf("c-%02d", c) }
	type copyOf struct {
		subject string
		body    []byte
		msgID   [2]string // per copy
	}
	var points []copyOf
	sums := make([]int64, customers)
	for i := range eventsPerCustomer {
		for c := range customers {
			n := i*customers + c
			ev := rewards.PointEvent{Activity: "purchase", Points: int64(n%7 + 1), SourceID: fmt.Sprint(n)}
			sums[c] += ev.Points
			var ids [2]string
			switch n % 3 {
			case 0: // its own key; the copies have different Nats-Msg-Ids
				ev.DedupKey = fmt.Sprintf("k-%d", n)
				ids = [2]string{fmt.Sprintf("a-%d", n), fmt.Sprintf("b-%d", n)}
			case 1: // no key of its own: the Nats-Msg-Id is the key
				ids = [2]string{fmt.Sprintf("m-%d", n), fmt.Sprintf("m-%d", n)}
			case 2: // its own key, no Nats-Msg-Id
				ev.DedupKey = fmt.Sprintf("k-%d", n)
			}
			points = append(points, copyOf{ingress.PointsSubject(e.cfg.PointsPrefix, tenantOf(c), customer(c)), mustJSON(t, ev), ids})
		}
	}
	for c := range customers { // redeem everything: refused unless every earlier event came first
		ev := rewards.PointEvent{DedupKey: "redeem-" + customer(c), Activity: "redeem", Points: -sums[c]}
		points = append(points, copyOf{ingress.PointsSubject(e.cfg.PointsPrefix, tenantOf(c), customer(c)), mustJSON(t, ev), [2]string{}})
	}
	var events []copyOf
	for i := range envelopes + silentEnvelopes {
		env := contracts.EventEnvelope{EventType: "order.created", Source: "shop", TenantID: "t-1",
			OccurredAt: time.Date(2026, 11, 21, 10, 0, i, 0, time.UTC), Payload: json.RawMessage(fmt.Sprintf(`{"order": %d}`, i))}
		if i >= envelopes {
			env.EventType = "nobody.listens"
		}
		var ids [2]string
		if i%2 == 0 { // half carry their event_id; the others get a derived one
			env.EventID = fmt.Sprintf("evt-%d", i)
			ids = [2]string{fmt.Sprintf("ea-%d", i), fmt.Sprintf("eb-%d", i)}
		} else {
			ids = [2]string{fmt.Sprintf("em-%d", i), fmt.Sprintf("em-%d", i)}
		}
		events = append(events, copyOf{ingress.EventsSubject(e.cfg.EventsPrefix, "t-1"), mustJSON(t, env), ids})
	}

	for _, m := range points {
		e.publish(m.subject, m.body, m.msgID[0])
	}
	for _, m := range events {
		e.publish(m.subject, m.body, m.msgID[0])
	}
	// Poison, each once; those of a customer come after its events.
	pointsAt := func(tenant, cust string) string { return ingress.PointsSubject(e.cfg.PointsPrefix, tenant, cust) }
	poison := map[string]string{ // Nats-Msg-Id -> reason
		"p-json":     ingress.ReasonInvalidPayload,
		"p-zero":     ingress.ReasonInvalidPayload,
		"p-field":    ingress.ReasonInvalidPayload,
		"p-subject":  ingress.ReasonInvalidSubject,
		"p-tenant":   ingress.ReasonUnknownTenant,
		"p-reused":   ingress.ReasonKeyReused,
		"p-overdraw": ingress.ReasonInvalidEvent,
		"p-gone":     ingress.ReasonNotEnrolled,
		"e-invalid":  ingress.ReasonInvalidPayload,
		"e-mismatch": ingress.ReasonTenantMismatch,
		"e-tenant":   ingress.ReasonUnknownTenant,
	}
	e.publish(pointsAt("default", customer(1)), []byte(`{"points": 5`), "p-json")
	e.publish(pointsAt("default", customer(1)), []byte(`{"dedup_key": "z", "points": 0}`), "p-zero")
	e.publish(pointsAt("default", customer(1)), []byte(`{"points": 5, "colour": "red"}`), "p-field")
	e.publish(e.cfg.PointsPrefix+".default.c%2e1.points", []byte(`{"points": 5}`), "p-subject") // a token no ID has
	e.publish(pointsAt("t-9", customer(1)), []byte(`{"points": 5}`), "p-tenant")
	e.publish(pointsAt("t-2", customer(0)), []byte(`{"dedup_key": "k-0", "points": 99}`), "p-reused")
	e.publish(pointsAt("default", customer(1)), []byte(`{"dedup_key": "overdraw", "points": -5}`), "p-overdraw")
	e.publish(pointsAt("default", "gone"), []byte(`{"dedup_key": "g-2", "points": 5}`), "p-gone")
	e.publish(ingress.EventsSubject(e.cfg.EventsPrefix, "t-1"), []byte(`{"event_type": "order.created", "tenant_id": "t-1", "occurred_at": "2026-11-21T10:00:00Z"}`), "e-invalid")
	e.publish(ingress.EventsSubject(e.cfg.EventsPrefix, "t-1"), mustJSON(t, contracts.EventEnvelope{EventType: "order.created", Source: "shop", TenantID: "t-2", OccurredAt: time.Now()}), "e-mismatch")
	e.publish(ingress.EventsSubject(e.cfg.EventsPrefix, "t-9"), mustJSON(t, contracts.EventEnvelope{EventType: "order.created", Source: "shop", TenantID: "t-9", OccurredAt: time.Now()}), "e-tenant")

	// The second copies, once JetStream's duplicate window (1 s here) is over.
	time.Sleep(2500 * time.Millisecond)
	for _, m := range points {
		e.publish(m.subject, m.body, m.msgID[1])
	}
	for _, m := range events {
		e.publish(m.subject, m.body, m.msgID[1])
	}

	handled := func(source, outcome string) float64 {
		return counter(t, reg, "ingest_handled_total", map[string]string{"source": source, "outcome": outcome})
	}
	wantPoints := 2*len(points) + 8
	wantEvents := 2*len(events) + 3
	waitFor(t, "every message handled", 4*time.Minute, func() (bool, error) {
		var p, ev float64
		for _, o := range []string{ingress.OutcomeApplied, ingress.OutcomeDuplicate, ingress.OutcomeNoRuns, ingress.OutcomeDeadLettered} {
			p += handled(ingress.SourcePoints, o)
			ev += handled(ingress.SourceEvents, o)
		}
		return p >= float64(wantPoints) && ev >= float64(wantEvents), nil
	})
	time.Sleep(time.Second) // anything more would come now

	check := func(source, outcome string, want int) {
		t.Helper()
		if got := handled(source, outcome); got != float64(want) {
			t.Errorf("ingest_handled_total{source=%s,outcome=%s} = %v, want %d", source, outcome, got, want)
		}
	}
	// Each point event is handled twice, once applied and once a duplicate;
	// but an update whose outcome was unknown at its deadline (applied, its
	// answer lost) is retried and answered from the entity's window as a
	// duplicate, so the split may move by at most the transient retries.
	// The entities' totals below are exact either way.
	applied, duplicate := handled(ingress.SourcePoints, ingress.OutcomeApplied), handled(ingress.SourcePoints, ingress.OutcomeDuplicate)
	transient := counter(t, reg, "ingest_retried_total", map[string]string{"reason": "transient"})
	if applied+duplicate != float64(2*len(points)) || applied > float64(len(points)) || applied < float64(len(points))-transient {
		t.Errorf("points handled: %v applied, %v duplicate after %v transient retries; want %d each, the split moved by at most the retries",
			applied, duplicate, transient, len(points))
	}
	check(ingress.SourcePoints, ingress.OutcomeDeadLettered, 8)
	check(ingress.SourceEvents, ingress.OutcomeApplied, envelopes)
	check(ingress.SourceEvents, ingress.OutcomeDuplicate, envelopes)
	check(ingress.SourceEvents, ingress.OutcomeNoRuns, 2*silentEnvelopes)
	check(ingress.SourceEvents, ingress.OutcomeDeadLettered, 3)
	t.Logf("consumed: points %v, events %v; retried: %v deferred, %v transient",
		counter(t, reg, "ingest_consumed_total", map[string]string{"source": ingress.SourcePoints}),
		counter(t, reg, "ingest_consumed_total", map[string]string{"source": ingress.SourceEvents}),
		counter(t, reg, "ingest_retried_total", map[string]string{"reason": "deferred"}),
		counter(t, reg, "ingest_retried_total", map[string]string{"reason": "transient"}))

	// The entities: exactly the distinct events, in order.
	for c := range customers {
		st, err := e.rewards.For(tenantOf(c)).Status(ctx, customer(c))
		if err != nil {
			t.Fatal(err)
		}
		if st.Points != 0 || st.LifetimePoints != sums[c] || st.EventCount != eventsPerCustomer+1 {
			t.Errorf("%s/%s: points %d, lifetime %d, events %d; want 0, %d, %d",
				tenantOf(c), customer(c), st.Points, st.LifetimePoints, st.EventCount, sums[c], eventsPerCustomer+1)
		}
	}
	// The platform: one run, one row per subscribed envelope.
	waitFor(t, "every run's row final", 2*time.Minute, func() (bool, error) {
		runs, err := e.store.ListRuns(ctx, def.ActivityID)
		if err != nil {
			return false, err
		}
		if len(runs) > envelopes {
			return false, fmt.Errorf("%d run rows, want %d", len(runs), envelopes)
		}
		for _, r := range runs {
			if r.Status != platformwf.StatusSucceeded {
				return false, nil
			}
		}
		return len(runs) == envelopes, nil
	})

	// The dead letters: the poison messages, once each, with their reasons.
	got := map[string]string{}
	for _, m := range e.deadLetters() {
		id := m.Headers().Get("Ingest-Original-Msg-Id")
		if _, dup := got[id]; dup {
			t.Errorf("dead letter %q twice", id)
		}
		got[id] = m.Headers().Get(ingress.HeaderReason)
		if m.Headers().Get(ingress.HeaderError) == "" || m.Headers().Get(ingress.HeaderSequence) == "" {
			t.Errorf("dead letter %q without its error or sequence: %v", id, m.Headers())
		}
	}
	var diffs []string
	for id, reason := range poison {
		if got[id] != reason {
			diffs = append(diffs, fmt.Sprintf("%s: got %q, want %q", id, got[id], reason))
		}
	}
	for id, reason := range got {
		if _, ok := poison[id]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: dead-lettered (%s), but is no poison", id, reason))
		}
	}
	sort.Strings(diffs)
	for _, d := range diffs {
		t.Error("dead letters: " + d)
	}

	// Nothing left for the consumers.
	if pending, unacked := e.backlog(ctx); pending != 0 || unacked != 0 {
		t.Errorf("points: %d pending, %d unacked after the run", pending, unacked)
	}
	cons, err := e.js.Consumer(ctx, e.cfg.EventsStream, e.cfg.EventsDurable)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumPending != 0 || info.NumAckPending != 0 {
		t.Errorf("events: %d pending, %d unacked after the run", info.NumPending, info.NumAckPending)
	}
}

// partitionConsumers returns the points stream's consumers, one per
// partition.
func (e *env) partitionConsumers(ctx context.Context) []jetstream.Consumer {
	e.t.Helper()
	cfg := e.cfg
	n := cfg.Partitions
	if n == 0 {
		n = ingress.DefaultPartitions
	}
	var out []jetstream.Consumer
	for p := range n {
		cons, err := e.js.Consumer(ctx, cfg.PointsStream, fmt.Sprintf("%s-%d", cfg.PointsDurable, p))
		if err != nil {
			e.t.Fatalf("partition %d's consumer: %v", p, err)
		}
		out = append(out, cons)
	}
	return out
}

// backlog sums the points partitions' messages not yet delivered and
// delivered but unacked.
func (e *env) backlog(ctx context.Context) (pending uint64, unacked int) {
	e.t.Helper()
	for _, cons := range e.partitionConsumers(ctx) {
		info, err := cons.Info(ctx)
		if err != nil {
			e.t.Fatal(err)
		}
		pending += info.NumPending
		unacked += info.NumAckPending
	}
	return pending, unacked
}

// An ingress that loses its connection mid-stream (its acks lost, updates
// perhaps applied but unacked) and a second one that takes over its durable
// consumers: every entity ends with exactly its distinct events, including
// those whose only key is their stream sequence, and nothing is
// dead-lettered. The time the second one takes to drain the backlog is
// logged (a first figure of lag recovery after a restart).
func TestIngressTakeoverMidStream(t *testing.T) {
	e := newEnv(t)
	e.cfg.AckWait = 3 * time.Second // what the dead ingress held comes back soon
	e.cfg.MaxPerCustomer = 8
	ctx := background(t)

	ncA, err := nats.Connect(e.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer ncA.Close()
	jsA, err := jetstream.New(ncA)
	if err != nil {
		t.Fatal(err)
	}
	regA := prometheus.NewRegistry()
	stopA := e.startOn(jsA, regA)

	const custs, perCustomer = 10, 40
	sums := make([]int64, custs)
	var copies [][2]string // subject, body; published twice unless keyless
	var keyless []int      // indexes of events published once, without any key
	for i := range perCustomer {
		for c := range custs {
			n := i*custs + c
			ev := rewards.PointEvent{Activity: "purchase", Points: int64(n%5 + 1), SourceID: fmt.Sprint(n)}
			sums[c] += ev.Points
			if n%4 != 3 {
				ev.DedupKey = fmt.Sprintf("k-%d", n)
			} else {
				keyless = append(keyless, len(copies))
			}
			copies = append(copies, [2]string{ingress.PointsSubject(e.cfg.PointsPrefix, "default", fmt.Sprintf("r-%d", c)), string(mustJSON(t, ev))})
		}
	}
	isKeyless := map[int]bool{}
	for _, i := range keyless {
		isKeyless[i] = true
	}
	for round := range 2 {
		for i, m := range copies {
			if round == 1 && isKeyless[i] {
				continue // a second copy without a key would be another event
			}
			e.publish(m[0], []byte(m[1]), "")
		}
	}
	total := 2*len(copies) - len(keyless)

	handledBy := func(reg *prometheus.Registry) float64 {
		return counter(t, reg, "ingest_handled_total", map[string]string{"source": ingress.SourcePoints, "outcome": ingress.OutcomeApplied}) +
			counter(t, reg, "ingest_handled_total", map[string]string{"source": ingress.SourcePoints, "outcome": ingress.OutcomeDuplicate})
	}
	waitFor(t, "a third of the stream handled", 3*time.Minute, func() (bool, error) {
		return handledBy(regA) >= float64(total/3), nil
	})
	ncA.Close() // the connection drops: acks and naks of work in flight are lost
	stopA()
	t.Logf("first ingress handled %v of %d messages before it lost its connection", handledBy(regA), total)

	regB := prometheus.NewRegistry()
	began := time.Now()
	e.start(regB)
	waitFor(t, "the backlog drained", 3*time.Minute, func() (bool, error) {
		pending, unacked := e.backlog(ctx)
		return pending == 0 && unacked == 0, nil
	})
	t.Logf("second ingress drained the backlog in %v (ack wait %v); handled %v", time.Since(began).Round(time.Millisecond), e.cfg.AckWait, handledBy(regB))

	for c := range custs {
		st, err := e.rewards.Status(ctx, fmt.Sprintf("r-%d", c))
		if err != nil {
			t.Fatal(err)
		}
		if st.Points != sums[c] || st.EventCount != perCustomer {
			t.Errorf("r-%d: %d points, %d events; want %d, %d", c, st.Points, st.EventCount, sums[c], perCustomer)
		}
	}
	if dl := e.deadLetters(); len(dl) != 0 {
		t.Errorf("%d dead letters, want none; the first: %v", len(dl), dl[0].Headers())
	}
}
