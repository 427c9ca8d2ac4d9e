package ingest_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/entityflow/entityflow/internal/devserver"
	"github.com/entityflow/entityflow/internal/ingress"
	"github.com/entityflow/entityflow/internal/rewardsclient"
	"github.com/entityflow/entityflow/internal/testenv"
	"github.com/entityflow/entityflow/workflows"
)

// freeAddress returns a loopback address with a port nobody listens on.
func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// proc is a worker process the test started; it dies with the test binary.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startProc(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = t.Output(), t.Output()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.signal(syscall.SIGKILL) })
	return p
}

// signal sends sig and waits for the process to end.
func (p *proc) signal(sig syscall.Signal) {
	_ = p.cmd.Process.Signal(sig)
	<-p.done
}

// scrape reads the metric families of a /metrics endpoint; nil while it
// does not answer.
func scrape(addr string) []*dto.MetricFamily {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	byName, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil
	}
	families := make([]*dto.MetricFamily, 0, len(byName))
	for _, f := range byName {
		families = append(families, f)
	}
	return families
}

// has reports whether families holds one named name.
func has(families []*dto.MetricFamily, name string) bool {
	return slices.ContainsFunc(families, func(f *dto.MetricFamily) bool { return f.GetName() == name })
}

// handledIn sums ingest_handled_total of the points source in a scrape.
func handledIn(families []*dto.MetricFamily) float64 {
	var n float64
	for _, o := range []string{ingress.OutcomeApplied, ingress.OutcomeDuplicate, ingress.OutcomeDeadLettered} {
		n += sum(families, "ingest_handled_total", map[string]string{"outcome": o, "source": ingress.SourcePoints})
	}
	return n
}

// 10,000 point events over 200 customers of two tenants, every one published
// twice (the second copy after JetStream's duplicate window, with the same
// Nats-Msg-Id or, for events with a key of their own, another one or none),
// but for one event per customer that has no key at all (its stream sequence
// is its key) and is published once; poison messages among them. The
// ingress runs as its own process (worker -task-queues none -ingest), the
// entities in another; a third of the way through, the ingress is killed
// with SIGKILL (acks of the work it had in flight lost, updates perhaps
// applied and unacked) and started again on the same durable consumer.
// Every entity ends with exactly its distinct events, applied in order (each
// customer's last event redeems its whole balance); the dead-letter stream
// holds the poison messages only; the restarted process's /metrics shows the
// ingress's series. The time to catch up after the restart is logged.
func TestIngressSIGKILLedMidStream(t *testing.T) {
	url, js := natsJetStream(t)
	srv := devserver.ForTest(t, devserver.Options{})
	bin := testenv.BuildProgram(t, testenv.WorkerPackage)
	e := &env{t: t, natsURL: url, js: js, cfg: testConfig()}
	e.deleteStreamsAtEnd()
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	c := srv.Client()
	rc := &rewardsclient.Client{Temporal: c, Logger: quietLogger(t)}

	common := []string{"-address", srv.FrontendHostPort(), "-log-level", "error"}
	startProc(t, bin, append(common, "-database-url", "sqlite://"+filepath.Join(t.TempDir(), "entities.db"),
		"-metrics-addr", "off", "-task-queues", workflows.RewardsTaskQueue)...)
	const ackWait = 5 * time.Second
	ingestArgs := append(common, "-database-url", "sqlite://"+filepath.Join(t.TempDir(), "ingest.db"),
		"-task-queues", "none", "-ingest", "-nats-url", e.natsURL, "-ingest-pin-ttl", e.cfg.PinnedTTL.String(),
		"-ingest-points-stream", e.cfg.PointsStream, "-ingest-points-prefix", e.cfg.PointsPrefix,
		"-ingest-events-stream", "off", "-ingest-dead-letter-stream", e.cfg.DeadLetterStream,
		"-ingest-dead-letter-prefix", e.cfg.DeadLetterPrefix, "-ingest-stream-duplicates", "1s",
		"-ingest-ack-wait", ackWait.String(), "-ingest-tenants", "default,t-2")
	startIngest := func() (*proc, string) {
		addr := freeAddress(t)
		p := startProc(t, bin, append(ingestArgs, "-metrics-addr", addr)...)
		waitFor(t, "the ingress's streams and /metrics", time.Minute, func() (bool, error) {
			if !has(scrape(addr), "ingest_held_messages") {
				return false, nil
			}
			_, err := js.Stream(ctx, e.cfg.PointsStream)
			return err == nil, nil
		})
		return p, addr
	}

	// A customer who unenrolled before the stream reaches them.
	gone := rc.For("default")
	if _, err := gone.ApplyPoints(ctx, "gone", workflows.PointEvent{DedupKey: "g-1", Points: 5}); err != nil {
		t.Fatal(err)
	}
	if err := gone.Unenroll(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if err := c.GetWorkflow(ctx, workflows.RewardsWorkflowID("gone"), "").Get(ctx, nil); err != nil {
		t.Fatal(err)
	}

	first, firstAddr := startIngest()

	const customers, perCustomer = 200, 50 // the last one a redemption
	tenantOf := func(c int) string {
		if c%4 == 0 {
			return "t-2"
		}
		return "default"
	}
	customer := func(c int) string { return fmt.Sprintf("k-%03d", c) }
	subject := func(c int) string { return ingress.PointsSubject(e.cfg.PointsPrefix, tenantOf(c), customer(c)) }
	type message struct {
		subject string
		body    []byte
		msgID   [2]string // per copy
		once    bool
	}
	var msgs []message
	sums := make([]int64, customers)
	for i := range perCustomer - 1 {
		for c := range customers {
			n := i*customers + c
			ev := workflows.PointEvent{Activity: "purchase", Points: int64(n%9 + 1), SourceID: fmt.Sprint(n)}
			sums[c] += ev.Points
			m := message{subject: subject(c)}
			switch {
			case i == perCustomer/2: // no key at all: its stream sequence is its key
				m.once = true
			case n%3 == 0: // its own key; the copies have different Nats-Msg-Ids
				ev.DedupKey = fmt.Sprintf("d-%d", n)
				m.msgID = [2]string{fmt.Sprintf("a-%d", n), fmt.Sprintf("b-%d", n)}
			case n%3 == 1: // no key of its own: the Nats-Msg-Id is the key
				m.msgID = [2]string{fmt.Sprintf("m-%d", n), fmt.Sprintf("m-%d", n)}
			default: // its own key, no Nats-Msg-Id
				ev.DedupKey = fmt.Sprintf("d-%d", n)
			}
			m.body = mustJSON(t, ev)
			msgs = append(msgs, m)
		}
	}
	for c := range customers { // redeem everything: refused unless every earlier event came first
		ev := workflows.PointEvent{DedupKey: "redeem-" + customer(c), Activity: "redeem", Points: -sums[c]}
		msgs = append(msgs, message{subject: subject(c), body: mustJSON(t, ev)})
	}
	poison := []struct {
		subject, body, msgID, reason string
	}{
		{subject(1), `{"points": 5`, "p-json", ingress.ReasonInvalidPayload},
		{subject(2), `{"dedup_key": "z", "points": 0}`, "p-zero", ingress.ReasonInvalidPayload},
		{subject(3), `{"points": 5, "colour": "red"}`, "p-field", ingress.ReasonInvalidPayload},
		{e.cfg.PointsPrefix + ".default.points", `{"points": 5}`, "p-subject", ingress.ReasonInvalidSubject},
		{ingress.PointsSubject(e.cfg.PointsPrefix, "t-9", customer(1)), `{"points": 5}`, "p-tenant", ingress.ReasonUnknownTenant},
		{subject(0), `{"dedup_key": "d-0", "points": 99}`, "p-reused", ingress.ReasonKeyReused},
		{subject(5), `{"dedup_key": "overdraw", "points": -100000}`, "p-overdraw", ingress.ReasonInvalidEvent},
		{ingress.PointsSubject(e.cfg.PointsPrefix, "default", "gone"), `{"dedup_key": "g-2", "points": 5}`, "p-gone", ingress.ReasonNotEnrolled},
	}

	published := time.Now()
	var total int
	publishAll := func(copyIndex int) {
		var futures []jetstream.PubAckFuture
		for _, m := range msgs {
			if m.once && copyIndex == 1 {
				continue
			}
			nm := nats.NewMsg(m.subject)
			nm.Data = m.body
			if id := m.msgID[copyIndex]; id != "" {
				nm.Header.Set(nats.MsgIdHdr, id)
			}
			f, err := js.PublishMsgAsync(nm)
			if err != nil {
				t.Fatalf("publishing: %v", err)
			}
			futures = append(futures, f)
			total++
		}
		for _, f := range futures {
			select {
			case ack := <-f.Ok():
				if ack.Duplicate {
					t.Fatalf("JetStream dropped %s (Nats-Msg-Id %q) as a duplicate", f.Msg().Subject, f.Msg().Header.Get(nats.MsgIdHdr))
				}
			case err := <-f.Err():
				t.Fatalf("publishing %s: %v", f.Msg().Subject, err)
			}
		}
	}
	publishAll(0)
	for _, p := range poison {
		e.publish(p.subject, []byte(p.body), p.msgID)
		total++
	}
	time.Sleep(1500 * time.Millisecond) // past the duplicate window of 1 s
	publishAll(1)
	t.Logf("published %d messages (%d events, %d poison) in %v", total, customers*perCustomer, len(poison), time.Since(published).Round(time.Millisecond))

	waitFor(t, "a third of the messages handled", 5*time.Minute, func() (bool, error) {
		return handledIn(scrape(firstAddr)) >= float64(total/3), nil
	})
	before := scrape(firstAddr)
	sinceStart := time.Since(published)
	first.signal(syscall.SIGKILL)
	killedAt := time.Now()
	pendingAtKill, unackedAtKill := e.backlog(ctx)
	t.Logf("SIGKILL after %v messages handled (%.0f/s); %d not yet delivered, %d delivered and unacked",
		handledIn(before), handledIn(before)/sinceStart.Seconds(), pendingAtKill, unackedAtKill)

	second, secondAddr := startIngest()
	restarted := time.Now()
	var firstAck time.Duration
	waitFor(t, "the backlog drained", 6*time.Minute, func() (bool, error) {
		if firstAck == 0 && handledIn(scrape(secondAddr)) > 0 {
			firstAck = time.Since(restarted)
		}
		pending, unacked := e.backlog(ctx)
		return pending == 0 && unacked == 0, nil
	})
	drained := time.Since(restarted)
	after := scrape(secondAddr)
	t.Logf("restarted %v after the kill; first ack %v after the restart; backlog of %d drained in %v (ack wait %v: what the killed process held came again after it); the restarted process handled %v (%.0f/s)",
		restarted.Sub(killedAt).Round(time.Millisecond), firstAck.Round(time.Millisecond), pendingAtKill+uint64(unackedAtKill),
		drained.Round(time.Millisecond), ackWait, handledIn(after), handledIn(after)/drained.Seconds())

	for _, name := range []string{"ingest_consumed_total", "ingest_handled_total", "ingest_consumer_pending_messages", "ingest_lag_seconds", "temporal_request"} {
		if !has(after, name) {
			t.Errorf("the worker's /metrics lacks %s", name)
		}
	}

	for cu := range customers {
		st, err := rc.For(tenantOf(cu)).Status(ctx, customer(cu))
		if err != nil {
			t.Fatal(err)
		}
		if st.Points != 0 || st.LifetimePoints != sums[cu] || st.EventCount != perCustomer {
			t.Errorf("%s/%s: points %d, lifetime %d, events %d; want 0, %d, %d",
				tenantOf(cu), customer(cu), st.Points, st.LifetimePoints, st.EventCount, sums[cu], perCustomer)
		}
	}
	got := map[string]string{}
	for _, m := range e.deadLetters() {
		h := m.Headers()
		id := h.Get("Ingest-Original-Msg-Id")
		if id == "" { // not a poison message: what happened to it?
			id = fmt.Sprintf("%s seq %s key %s (%s)", h.Get(ingress.HeaderSubject), h.Get(ingress.HeaderSequence), h.Get(ingress.HeaderDedupKey), h.Get(ingress.HeaderError))
		}
		if _, dup := got[id]; dup {
			t.Errorf("dead letter %q twice", id)
		}
		got[id] = h.Get(ingress.HeaderReason)
	}
	var diffs []string
	for _, p := range poison {
		if got[p.msgID] != p.reason {
			diffs = append(diffs, fmt.Sprintf("%s: got %q, want %q", p.msgID, got[p.msgID], p.reason))
		}
		delete(got, p.msgID)
	}
	for id, reason := range got {
		diffs = append(diffs, fmt.Sprintf("%s: dead-lettered (%s), but is no poison", id, reason))
	}
	sort.Strings(diffs)
	for _, d := range diffs {
		t.Error("dead letters: " + d)
	}
	second.signal(syscall.SIGTERM)
}
