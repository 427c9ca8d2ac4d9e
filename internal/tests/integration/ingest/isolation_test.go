package ingest_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/entityflow/entityflow/internal/service/deadletters"
	"github.com/entityflow/entityflow/internal/service/ingress"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
	"github.com/entityflow/entityflow/internal/testkit/testenv"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// waitPoints waits until tenant's customer has want points and events events.
func (e *env) waitPoints(tenant, customer string, want int64, events int) {
	e.t.Helper()
	ctx := background(e.t)
	waitFor(e.t, fmt.Sprintf("%s/%s at %d points", tenant, customer, want), time.Minute, func() (bool, error) {
		st, err := e.rewards.For(tenant).Status(ctx, customer)
		if err != nil {
			return false, nil
		}
		return st.Points == want && st.EventCount == int64(events), nil
	})
}

// publishAck publishes one message and returns JetStream's ack.
func (e *env) publishAck(subject string, body []byte, msgID string) (*jetstream.PubAck, error) {
	m := nats.NewMsg(subject)
	m.Data = body
	if msgID != "" {
		m.Header.Set(nats.MsgIdHdr, msgID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return e.js.PublishMsg(ctx, m)
}

// Two tenants use their own order numbers as Nats-Msg-Id: tenant-b's
// order-1, a moment after tenant-a's, is stored and applied, not taken for
// tenant-a's. A tenant that publishes another tenant's next ID first
// suppresses nothing. A producer's retry of one message (same Nats-Msg-Id)
// is stored too and counts once: the entity's window is the authority.
func TestTenantsShareNoMsgID(t *testing.T) {
	e := newEnv(t)
	e.cfg.Tenants = nil
	e.start(prometheus.NewRegistry())
	ctx := background(t)
	for _, name := range []string{e.cfg.PointsStream, e.cfg.EventsStream} {
		st, err := e.js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if d := st.CachedInfo().Config.Duplicates; d != 0 {
			t.Errorf("stream %s keeps a duplicate window of %v, want none", name, d)
		}
	}
	at := func(tenant, customer string) string {
		return ingress.PointsSubject(e.cfg.PointsPrefix, tenant, customer)
	}
	for _, m := range []struct{ subject, body, id string }{
		{at("tenant-a", "c-1"), `{"activity":"purchase","points":10}`, "order-1"},
		{at("tenant-b", "c-1"), `{"activity":"purchase","points":20}`, "order-1"},
		// tenant-a publishes tenant-b's next order number first.
		{at("tenant-a", "c-2"), `{"activity":"purchase","points":1}`, "order-2"},
		{at("tenant-b", "c-1"), `{"activity":"purchase","points":30}`, "order-2"},
		// tenant-b's producer retries its order-2 (a lost PubAck).
		{at("tenant-b", "c-1"), `{"activity":"purchase","points":30}`, "order-2"},
	} {
		ack, err := e.publishAck(m.subject, []byte(m.body), m.id)
		if err != nil {
			t.Fatalf("publishing %s on %s: %v", m.id, m.subject, err)
		}
		if ack.Duplicate {
			t.Errorf("%s on %s was dropped as a duplicate", m.id, m.subject)
		}
	}
	e.waitPoints("tenant-a", "c-1", 10, 1)
	e.waitPoints("tenant-a", "c-2", 1, 1)
	e.waitPoints("tenant-b", "c-1", 50, 2)
}

// Tenant acme.eu's customer c1 and tenant acme's customer eu.c1 have
// subjects of their own, on the ingress and in the dead letters: each
// event reaches its own entity, a consumer filtering one tenant receives
// exactly its messages, and so does a dead-letter filter. A subject whose
// customer spans two tokens has no stream: its publisher gets an error.
func TestDottedIDsStayApart(t *testing.T) {
	e := newEnv(t)
	e.cfg.Tenants = nil
	e.start(prometheus.NewRegistry())
	ctx := background(t)
	a := ingress.PointsSubject(e.cfg.PointsPrefix, "acme.eu", "c1")
	b := ingress.PointsSubject(e.cfg.PointsPrefix, "acme", "eu.c1")
	if a == b {
		t.Fatalf("one subject for both: %s", a)
	}
	e.publish(a, []byte(`{"dedup_key":"k-1","points":10}`), "")
	e.publish(b, []byte(`{"dedup_key":"k-1","points":20}`), "")
	e.publish(a, []byte(`{"dedup_key":"bad","points":0}`), "") // dead-lettered
	e.publish(b, []byte(`{"dedup_key":"bad","points":0}`), "") // dead-lettered
	e.waitPoints("acme.eu", "c1", 10, 1)
	e.waitPoints("acme", "eu.c1", 20, 1)

	// A consumer of tenant acme's point events gets acme's, not acme.eu's.
	for _, tc := range []struct {
		tenant, customer string
		want             string
	}{{"acme", "", b}, {"acme.eu", "", a}, {"acme", "eu.c1", b}, {"acme.eu", "c1", a}} {
		filter := ingress.PartitionRoot + ".*." + ingress.PointsFilter(e.cfg.PointsPrefix, tc.tenant, tc.customer)
		oc, err := e.js.OrderedConsumer(ctx, e.cfg.PointsStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
		if err != nil {
			t.Fatal(err)
		}
		batch, err := oc.FetchNoWait(10)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			if got, _ := ingress.PublishedSubject(m.Subject()); got != tc.want {
				t.Errorf("filter %s received %s, want only %s", filter, got, tc.want)
			}
		}
		if n != 2 {
			t.Errorf("filter %s received %d messages, want 2", filter, n)
		}
	}

	// The dead letters keep the subjects apart too.
	bus := e.deadLetterBus()
	waitFor(t, "two dead letters", time.Minute, func() (bool, error) {
		l, err := bus.List(ctx, deadletters.Filter{})
		return len(l) == 2, err
	})
	for _, tc := range []struct{ tenant, want string }{{"acme", b}, {"acme.eu", a}} {
		f, err := deadletters.ParseFilter("", ingress.PointsFilter(e.cfg.PointsPrefix, tc.tenant, ""), "", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		letters, err := bus.List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if len(letters) != 1 || letters[0].Subject != tc.want {
			t.Errorf("the dead letters of tenant %s: %+v, want the one on %s", tc.tenant, letters, tc.want)
		}
	}

	// A customer ID spread over two tokens is refused at publish.
	if ack, err := e.publishAck(e.cfg.PointsPrefix+".acme.eu.c1.points", []byte(`{"dedup_key":"k-2","points":1}`), ""); err == nil {
		t.Errorf("a subject of five tokens was stored: %+v", ack)
	}
}

// Two tenants' letters with the same dedup key (order-1, each customer
// unenrolled): once both customers are enrolled again, a replay right
// away applies both, each to its own entity, and -purge deletes both
// letters because each one's own message was applied; a replay of them
// again finds them applied (duplicate) and changes no balance.
func TestReplayOfTwoTenantsSameKey(t *testing.T) {
	e := newEnv(t)
	e.cfg.Tenants = nil
	e.cfg.StreamDuplicates = 5 * time.Minute
	ctx := background(t)
	for _, tn := range []string{"tenant-a", "tenant-b"} {
		c := e.rewards.For(tn)
		if _, err := c.ApplyPoints(ctx, "c-1", rewards.PointEvent{DedupKey: "first", Points: 1}); err != nil {
			t.Fatal(err)
		}
		if err := c.Unenroll(ctx, "c-1"); err != nil {
			t.Fatal(err)
		}
		if err := e.c.GetWorkflow(ctx, rewards.RewardsWorkflowIDFor(tn, "c-1"), "").Get(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	e.start(prometheus.NewRegistry())
	e.publish(ingress.PointsSubject(e.cfg.PointsPrefix, "tenant-a", "c-1"), []byte(`{"points":10}`), "order-1")
	e.publish(ingress.PointsSubject(e.cfg.PointsPrefix, "tenant-b", "c-1"), []byte(`{"points":20}`), "order-1")
	bus := e.deadLetterBus()
	var letters []deadletters.Letter
	waitFor(t, "both letters", time.Minute, func() (bool, error) {
		var err error
		letters, err = bus.List(ctx, deadletters.Filter{})
		return len(letters) == 2, err
	})
	for _, l := range letters {
		if l.Reason != ingress.ReasonNotEnrolled || l.DedupKey != "order-1" {
			t.Fatalf("letter %+v, want not-enrolled with key order-1", l)
		}
	}
	for _, tn := range []string{"tenant-a", "tenant-b"} {
		if _, err := e.rewards.For(tn).Enroll(ctx, "c-1"); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := bus.Replay(ctx, letters, deadletters.ReplayOptions{Wait: time.Minute, Purge: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Applied != 2 || rep.Failed() {
		t.Fatalf("replay: %+v, want both applied", rep)
	}
	for _, r := range rep.Results {
		if !r.Purged || r.MsgID == "order-1" {
			t.Errorf("letter %d: purged %v, sent as %q", r.Letter.Sequence, r.Purged, r.MsgID)
		}
	}
	e.waitPoints("tenant-a", "c-1", 10, 1)
	e.waitPoints("tenant-b", "c-1", 20, 1)
	if left, err := bus.List(ctx, deadletters.Filter{}); err != nil || len(left) != 0 {
		t.Errorf("after the purge: %d letters (%v)", len(left), err)
	}
	again, err := bus.Replay(ctx, letters, deadletters.ReplayOptions{Wait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if again.Duplicate != 2 || again.Failed() {
		t.Errorf("a second replay: %+v, want two duplicates", again)
	}
	e.waitPoints("tenant-a", "c-1", 10, 1)
	e.waitPoints("tenant-b", "c-1", 20, 1)
}

// A points stream and an events stream as the previous release made them
// (subjects {prefix}.>, JetStream's 2-minute duplicate window), holding a
// message of a customer whose ID spans two tokens: the ingress of this
// release takes them over (one token per ID, no duplicate window, the
// replay stream as a source), applies what they held as that release read
// it, and an escaped subject reaches the same entity; a customer ID over
// two tokens is refused at publish from then on.
func TestStreamOfTheLastReleaseKeepsWorking(t *testing.T) {
	e := newEnv(t)
	ctx := background(t)
	for _, cfg := range []jetstream.StreamConfig{
		{Name: e.cfg.PointsStream, Subjects: []string{e.cfg.PointsPrefix + ".>"}, Duplicates: 2 * time.Minute,
			SubjectTransform: &jetstream.SubjectTransformConfig{Source: e.cfg.PointsPrefix + ".>",
				Destination: fmt.Sprintf("%s.{{partition(%d)}}.%s.>", ingress.PartitionRoot, ingress.DefaultPartitions, e.cfg.PointsPrefix)}},
		{Name: e.cfg.EventsStream, Subjects: []string{e.cfg.EventsPrefix + ".>"}, Duplicates: 2 * time.Minute},
	} {
		if _, err := e.js.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	e.publish(e.cfg.PointsPrefix+".default.c.1.points", []byte(`{"dedup_key":"old-1","points":5}`), "")
	e.publish(ingress.PointsSubject(e.cfg.PointsPrefix, "default", "c-2"), []byte(`{"dedup_key":"old-2","points":3}`), "")

	e.start(prometheus.NewRegistry())
	var cfg jetstream.StreamConfig
	waitFor(t, "the ingress to take the points stream over", time.Minute, func() (bool, error) {
		st, err := e.js.Stream(ctx, e.cfg.PointsStream)
		if err != nil {
			return false, err
		}
		cfg = st.CachedInfo().Config
		return len(cfg.Sources) > 0, nil
	})
	if cfg.Duplicates != 0 || len(cfg.Subjects) != 1 || cfg.Subjects[0] != e.cfg.PointsPrefix+".*.*.points" ||
		len(cfg.Sources) != 1 || cfg.Sources[0].Name != e.cfg.ReplayStream {
		t.Errorf("the points stream after the ingress started: duplicates %v, subjects %v, sources %+v", cfg.Duplicates, cfg.Subjects, cfg.Sources)
	}
	e.waitPoints("default", "c.1", 5, 1)
	e.waitPoints("default", "c-2", 3, 1)
	e.publish(ingress.PointsSubject(e.cfg.PointsPrefix, "default", "c.1"), []byte(`{"dedup_key":"new-1","points":7}`), "")
	e.waitPoints("default", "c.1", 12, 2)
	if _, err := e.publishAck(e.cfg.PointsPrefix+".default.c.1.points", []byte(`{"dedup_key":"new-2","points":1}`), ""); err == nil {
		t.Error("a customer ID over two tokens was stored")
	}
}

// A worker program with -ingest whose ingress cannot start (a stream of
// someone else's holds its subjects) polls its task queue all the same, and
// its ingress starts by itself once the way is clear: it is tried again
// while the process runs, never ending it.
func TestWorkerServesItsQueuesWhileTheIngressCannotStart(t *testing.T) {
	url, js := natsJetStream(t)
	srv := devserver.ForTest(t, devserver.Options{})
	e := &env{t: t, natsURL: url, js: js, cfg: testConfig()}
	e.deleteStreamsAtEnd()
	ctx := background(t)
	const blocker = "BLOCKER"
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: blocker, Subjects: []string{e.cfg.PointsPrefix + ".>"}}); err != nil {
		t.Fatal(err)
	}
	bin := testenv.BuildProgram(t, testenv.WorkerPackage)
	p := testenv.StartProgram(t, bin, "-address", srv.FrontendHostPort(), "-log-level", "error", "-metrics-addr", "off",
		"-database-url", "sqlite://"+filepath.Join(t.TempDir(), "entities.db"), "-task-queues", rewards.RewardsTaskQueue,
		"-ingest", "-nats-url", url, "-ingest-points-stream", e.cfg.PointsStream, "-ingest-points-prefix", e.cfg.PointsPrefix,
		"-ingest-events-stream", "off", "-ingest-dead-letter-stream", e.cfg.DeadLetterStream, "-ingest-dead-letter-prefix", e.cfg.DeadLetterPrefix,
		"-ingest-replay-stream", e.cfg.ReplayStream, "-ingest-replay-prefix", e.cfg.ReplayPrefix)
	// Only the program polls the dev server's rewards queue.
	rc := &rewardsclient.Client{Temporal: srv.Client(), Logger: quietLogger(t)}
	if res, err := rc.ApplyPoints(ctx, "direct", rewards.PointEvent{DedupKey: "d-1", Points: 4}); err != nil || !res.Applied {
		t.Fatalf("an update while the ingress cannot start: %+v, %v", res, err)
	}
	if _, err := js.Stream(ctx, e.cfg.PointsStream); err == nil {
		t.Fatal("the points stream exists beside the stream holding its subjects")
	}
	if err := js.DeleteStream(ctx, blocker); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the ingress to start by itself", 2*time.Minute, func() (bool, error) {
		_, err := js.Stream(ctx, e.cfg.PointsStream)
		return err == nil, nil
	})
	e.publish(ingress.PointsSubject(e.cfg.PointsPrefix, "default", "bus"), []byte(`{"dedup_key":"b-1","points":6}`), "")
	waitFor(t, "the bus's event applied", time.Minute, func() (bool, error) {
		st, err := rc.Status(ctx, "bus")
		return err == nil && st.Points == 6, nil
	})
	select {
	case <-p.Done():
		t.Fatal("the worker ended")
	default:
	}
}
