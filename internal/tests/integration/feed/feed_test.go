// Package feed_test tests the rewards entities' change feed end to end: a
// real worker process (the worker program, -change-feed all) on a Temporal
// dev server publishing to a real NATS server (bin/nats-server), the stream
// read back and checked: per entity, seq 1..n without gap or duplicate, in
// order, every payload valid against contracts/rewards-change.schema.json;
// through ContinueAsNew, a worker SIGKILL and a NATS outage.
package feed_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/service/changefeed"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
	"github.com/entityflow/entityflow/internal/testkit/histories"
	"github.com/entityflow/entityflow/internal/testkit/natsserver"
	"github.com/entityflow/entityflow/internal/testkit/schematest"
	"github.com/entityflow/entityflow/internal/testkit/testenv"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// env is one test's servers and worker program.
type env struct {
	t       *testing.T
	nats    *natsserver.Server
	natsDir string
	srv     interface{ FrontendHostPort() string }
	tc      client.Client
	bin     string
	rc      *rewardsclient.Client
	db      string
	// readerOpts are the options of the test's own connection that reads
	// the stream back (TLS and a credential on a secured bus).
	readerOpts []nats.Option
}

// newEnv starts a NATS server, a dev server and builds the worker program.
func newEnv(t *testing.T, eventsPerRun int) *env {
	t.Helper()
	e := newEnvWithoutNATS(t, eventsPerRun)
	e.startNATS("")
	return e
}

// newEnvWithoutNATS is newEnv for a test that starts its own NATS servers.
func newEnvWithoutNATS(t *testing.T, eventsPerRun int) *env {
	t.Helper()
	testenv.Short(t, "a NATS server and a Temporal dev server")
	_, err := natsserver.Binary()
	testenv.Require(t, "nats-server", err)
	e := &env{t: t, natsDir: t.TempDir()}
	srv := devserver.ForTest(t, devserver.Options{})
	e.srv, e.tc = srv, srv.Client()
	e.bin = testenv.BuildProgram(t, testenv.WorkerPackage)
	e.db = "sqlite://" + filepath.Join(t.TempDir(), "entity.db")
	e.rc = &rewardsclient.Client{Temporal: e.tc, Options: rewards.Options{EventsPerRun: eventsPerRun}, AttemptTimeout: 10 * time.Second, Attempts: 60}
	return e
}

// startNATS starts the NATS server on addr (empty: a free port) with the
// test's JetStream directory, so a restart keeps the stream.
func (e *env) startNATS(addr string) {
	s, err := natsserver.Start(natsserver.Options{Addr: addr, StoreDir: e.natsDir})
	if err != nil {
		e.t.Fatal(err)
	}
	e.nats = s
	e.t.Cleanup(s.Stop)
}

// startWorker starts the worker program with the feed on (all) and the
// NATS server's URL, args (more flags) and environ (KEY=value) besides.
func (e *env) startWorker(args []string, environ ...string) *exec.Cmd {
	e.t.Helper()
	args = append([]string{"-address", e.srv.FrontendHostPort(), "-database-url", e.db, "-metrics-addr", "off",
		"-log-level", "error", "-task-queues", rewards.RewardsTaskQueue, "-change-feed", "all", "-nats-url", e.nats.URL}, args...)
	cmd := exec.Command(e.bin, args...)
	cmd.Env = append(os.Environ(), environ...)
	cmd.Stdout, cmd.Stderr = e.t.Output(), e.t.Output()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd
}

// drive sends each customer n events (several tier changes, a redemption)
// as apply-points updates, then unenrolls it; retried events are applied
// once by the entity's dedup window.
func (e *env) drive(ctx context.Context, customers []string, n int, progress func(i int)) {
	e.t.Helper()
	e.apply(ctx, e.rc, customers, n, progress)
	e.unenroll(ctx, e.rc, customers)
}

// apply sends each of rc's customers, concurrently, n events one after
// another (90 points each, every tenth redeeming 400), calling progress
// after each.
func (e *env) apply(ctx context.Context, rc *rewardsclient.Client, customers []string, n int, progress func(i int)) {
	e.t.Helper()
	e.each(customers, func(cust string) error {
		for i := range n {
			ev := rewards.PointEvent{DedupKey: fmt.Sprintf("%s-%d", cust, i), Activity: "purchase", Points: eventPoints(i)}
			if _, err := rc.ApplyPoints(ctx, cust, ev); err != nil {
				return fmt.Errorf("%s event %d: %w", cust, i, err)
			}
			if progress != nil {
				progress(i)
			}
		}
		return nil
	})
}

// eventPoints are the points of apply's i-th event.
func eventPoints(i int) int64 {
	if i%10 == 9 {
		return -400
	}
	return 90
}

// unenroll unenrolls each of rc's customers.
func (e *env) unenroll(ctx context.Context, rc *rewardsclient.Client, customers []string) {
	e.t.Helper()
	e.each(customers, func(cust string) error {
		if err := rc.Unenroll(ctx, cust); err != nil {
			return fmt.Errorf("unenrolling %s: %w", cust, err)
		}
		return nil
	})
}

// each runs do for every customer at once and fails the test with the
// errors.
func (e *env) each(customers []string, do func(customer string) error) {
	e.t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(customers))
	for _, cust := range customers {
		wg.Go(func() {
			if err := do(cust); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		e.t.Fatal(err)
	}
}

// waitClosed waits until the entity of every workflow ID has completed (its
// unenrolled change published).
func (e *env) waitClosed(ctx context.Context, workflowIDs []string) {
	e.t.Helper()
	for _, id := range workflowIDs {
		run := e.tc.GetWorkflow(ctx, id, "")
		var st rewards.Status
		if err := run.Get(ctx, &st); err != nil {
			e.t.Fatalf("entity %s: %v", id, err)
		}
	}
}

// workflowIDs are the workflow IDs of the default tenant's customers.
func workflowIDs(customers []string) []string {
	var out []string
	for _, c := range customers {
		out = append(out, rewards.RewardsWorkflowID(c))
	}
	return out
}

// message is one message read back from the stream.
type message struct {
	msgID  string
	change rewards.Change
	raw    []byte
}

// reader connects to the NATS server with readerOpts until the test ends.
func (e *env) reader() jetstream.JetStream {
	e.t.Helper()
	return connectReader(e.t, e.nats.URL, e.readerOpts...)
}

// connectReader connects to the NATS server at url with opts until the
// test ends.
func connectReader(t *testing.T, url string, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
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

// readStream reads every message of the feed's stream.
func (e *env) readStream(ctx context.Context) []message {
	e.t.Helper()
	return readStream(e.t, ctx, e.reader(), changefeed.DuplicateWindow)
}

// readStream reads every message of the feed's stream through js; its
// duplicate window must be window.
func readStream(t *testing.T, ctx context.Context, js jetstream.JetStream, window time.Duration) []message {
	t.Helper()
	s, err := js.Stream(ctx, changefeed.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Duplicates != window {
		t.Errorf("duplicate window %v, want %v", info.Config.Duplicates, window)
	}
	var out []message
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("stream message %d: %v", seq, err)
		}
		var c rewards.Change
		dec := json.NewDecoder(bytes.NewReader(m.Data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			t.Fatalf("stream message %d %s: %v", seq, m.Data, err)
		}
		out = append(out, message{msgID: m.Header.Get(jetstream.MsgIDHeader), change: c, raw: m.Data})
		if want := changefeed.Subject(changefeed.DefaultPrefix, c.TenantID, c.CustomerID); m.Subject != want {
			t.Errorf("change %s on %s, want %s", c.MsgID(), m.Subject, want)
		}
	}
	return out
}

// check verifies the stream: every payload valid, each entity's changes
// seq 1..n in order without gap or duplicate, Nats-Msg-Id {workflow}:{entity run}:{seq},
// enrolled first and unenrolled last (for each of workflowIDs), the
// balances adding up, and returns the number of changes.
func check(t *testing.T, msgs []message, workflowIDs []string) int {
	t.Helper()
	sch := compileSchema(t)
	next := map[string]int64{}
	last := map[string]rewards.Change{}
	for _, m := range msgs {
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(m.raw))
		if err != nil {
			t.Fatal(err)
		}
		if err := sch.Validate(inst); err != nil {
			t.Errorf("change %s does not validate: %v\n%s", m.msgID, err, m.raw)
		}
		c := m.change
		if p, ok := last[c.WorkflowID]; c.EntityRunID == "" || ok && p.EntityRunID != c.EntityRunID {
			t.Errorf("change %s: entity_run_id %q, want one the same through the entity's runs", m.msgID, c.EntityRunID)
		}
		if m.msgID != c.MsgID() {
			t.Errorf("Nats-Msg-Id %q, want %q", m.msgID, c.MsgID())
		}
		want := next[c.WorkflowID] + 1
		if c.Seq != want {
			t.Fatalf("%s: seq %d after %d: a gap, a duplicate or out of order", c.WorkflowID, c.Seq, want-1)
		}
		if want == 1 && c.Kind != rewards.ChangeEnrolled {
			t.Errorf("%s: first change %s", c.WorkflowID, c.Kind)
		}
		if p, ok := last[c.WorkflowID]; ok && c.Kind == rewards.ChangeBalanceChanged && p.Balance+c.Delta != c.Balance {
			t.Errorf("%s seq %d: balance %d + %d != %d", c.WorkflowID, c.Seq, p.Balance, c.Delta, c.Balance)
		}
		next[c.WorkflowID], last[c.WorkflowID] = c.Seq, c
	}
	for _, id := range workflowIDs {
		if last[id].Kind != rewards.ChangeUnenrolled {
			t.Errorf("%s: last change %+v, want unenrolled", id, last[id])
		}
	}
	return len(msgs)
}

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	return schematest.Compile(t, contracts.RewardsChangeSchemaID, contracts.RewardsChangeSchema())
}

func customers(prefix string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s-%d", prefix, i))
	}
	return out
}

// The feed through several ContinueAsNew: 4 customers, 60 events each at 15
// events a run, tier changes up and down, then unenrollment.
func TestFeedThroughContinueAsNew(t *testing.T) {
	e := newEnv(t, 15)
	e.startWorker(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	custs := customers("feed-can", 4)
	e.drive(ctx, custs, 60, nil)
	e.waitClosed(ctx, workflowIDs(custs))
	n := check(t, e.readStream(ctx), workflowIDs(custs))
	st := runs(t, ctx, e.tc, custs[0])
	t.Logf("%d changes of %d entities, %d runs each", n, len(custs), st)
	if st < 4 {
		t.Fatalf("%d runs, want ContinueAsNew", st)
	}
	recordIfAsked(t, e.tc, custs[0], "feed-can")
}

// A worker killed with SIGKILL mid-burst and started again: the publish
// activities it had running time out and are retried, runs are replayed,
// and the stream still holds each change once, in order.
func TestFeedWorkerSIGKILLed(t *testing.T) {
	e := newEnv(t, 20)
	first := e.startWorker(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	custs := customers("feed-kill", 4)
	var once sync.Once
	killed := make(chan struct{})
	go func() {
		<-killed
		time.Sleep(time.Second)
		e.startWorker(nil)
	}()
	e.drive(ctx, custs, 60, func(i int) {
		if i == 25 {
			once.Do(func() {
				_ = first.Process.Kill()
				_ = first.Wait()
				t.Log("worker SIGKILLed")
				close(killed)
			})
		}
	})
	e.waitClosed(ctx, workflowIDs(custs))
	n := check(t, e.readStream(ctx), workflowIDs(custs))
	t.Logf("%d changes of %d entities after a worker SIGKILL", n, len(custs))
}

// NATS stopped for 15 s mid-burst and started again on the same address and
// store: publish activities fail and are retried, ContinueAsNew carries the
// outbox meanwhile, and nothing is lost, duplicated or reordered.
func TestFeedNATSOutage(t *testing.T) {
	e := newEnv(t, 10)
	e.startWorker(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	custs := customers("feed-outage", 3)
	var once sync.Once
	e.drive(ctx, custs, 50, func(i int) {
		if i == 15 {
			once.Do(func() {
				addr := e.nats.Addr
				e.nats.Stop()
				t.Log("NATS stopped")
				go func() {
					time.Sleep(15 * time.Second)
					e.startNATS(addr)
					t.Log("NATS started again")
				}()
			})
		}
	})
	e.waitClosed(ctx, workflowIDs(custs))
	n := check(t, e.readStream(ctx), workflowIDs(custs))
	carried := 0
	for _, cust := range custs {
		chain, err := histories.Chain(ctx, e.tc, rewards.RewardsWorkflowID(cust))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range chain {
			carried += len(carriedOutbox(t, r))
		}
	}
	t.Logf("%d changes of %d entities through a 15 s NATS outage; %d runs of %s; %d changes carried unpublished through ContinueAsNew",
		n, len(custs), runs(t, ctx, e.tc, custs[0]), custs[0], carried)
	if carried == 0 {
		t.Fatal("no ContinueAsNew carried an outbox: the outage did not reach the entities")
	}
	for _, cust := range custs {
		recordIfAsked(t, e.tc, cust, "feed-outage-"+cust[len(cust)-1:])
	}
}

// A worker with the feed on started while NATS is down (nothing listens at
// its -nats-url) polls its task queue at once and applies events, the
// balances right, its changes waiting in the entities' outboxes (and carried
// through ContinueAsNew); once a NATS server comes up at that URL, the feed
// connects, creates its stream and publishes them: the stream holds each
// change once, in order.
func TestFeedWorkerStartsWhileNATSIsDown(t *testing.T) {
	e := newEnv(t, 10)
	addr := e.nats.Addr
	e.nats.Stop()
	e.startWorker(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	custs := customers("feed-down", 3)
	const events = 30
	started := time.Now()
	// Generous, but not the test's whole budget: a worker that waits for
	// NATS before it polls never applies them.
	actx, cancelApply := context.WithTimeout(ctx, 4*time.Minute)
	defer cancelApply()
	e.apply(actx, e.rc, custs, events, nil)
	var want int64
	for i := range events {
		want += eventPoints(i)
	}
	for _, cust := range custs {
		st, err := e.rc.Status(ctx, cust)
		if err != nil {
			t.Fatal(err)
		}
		if st.Points != want {
			t.Errorf("%s: %d points with NATS down, want %d", cust, st.Points, want)
		}
	}
	t.Logf("%d events of %d customers applied in %v with NATS down", events*len(custs), len(custs), time.Since(started))
	e.startNATS(addr)
	e.unenroll(ctx, e.rc, custs)
	e.waitClosed(ctx, workflowIDs(custs))
	n := check(t, e.readStream(ctx), workflowIDs(custs))
	carried := 0
	for _, cust := range custs {
		chain, err := histories.Chain(ctx, e.tc, rewards.RewardsWorkflowID(cust))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range chain {
			carried += len(carriedOutbox(t, r))
		}
	}
	t.Logf("%d changes of %d entities published once NATS was up; %d changes carried unpublished through ContinueAsNew", n, len(custs), carried)
	if carried == 0 {
		t.Fatal("no ContinueAsNew carried an outbox: the changes did not wait for NATS")
	}
}

// carriedOutbox returns the outbox a run handed to the next through
// ContinueAsNew (nil when it did not continue as new).
func carriedOutbox(t *testing.T, r histories.Run) []rewards.Change {
	t.Helper()
	events := r.History.GetEvents()
	attrs := events[len(events)-1].GetWorkflowExecutionContinuedAsNewEventAttributes()
	if attrs == nil {
		return nil
	}
	var in rewards.RewardsInput
	if err := converter.GetDefaultDataConverter().FromPayloads(attrs.GetInput(), &in); err != nil {
		t.Fatal(err)
	}
	if in.Carried == nil {
		return nil
	}
	return in.Carried.Outbox
}

// publishActivity reports whether a run scheduled the PublishChanges
// activity (the local publication having failed).
func publishActivity(r histories.Run) bool {
	for _, ev := range r.History.GetEvents() {
		if ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == rewards.ActivityPublishChanges {
			return true
		}
	}
	return false
}

// runs counts the runs of a customer's entity.
func runs(t *testing.T, ctx context.Context, c client.Client, customer string) int {
	t.Helper()
	chain, err := histories.Chain(ctx, c, rewards.RewardsWorkflowID(customer))
	if err != nil {
		t.Fatal(err)
	}
	return len(chain)
}

// recordIfAsked stores, under RECORD_HISTORIES (make histories), the runs of
// the customer's entity that show something new as fixtures
// rewards-{release}-{name}-run{n}, for the replay test.
func recordIfAsked(t *testing.T, c client.Client, customer, name string) {
	t.Helper()
	if os.Getenv("RECORD_HISTORIES") == "" {
		return
	}
	workflowID := rewards.RewardsWorkflowID(customer)
	chain, err := histories.Chain(context.Background(), c, workflowID)
	if err != nil {
		t.Fatal(err)
	}
	novel := histories.Novel(chain)
	// Also the first run that continued as new with changes unpublished,
	// and the first that fell back to the PublishChanges activity.
	outbox, fallback := false, false
	for i, r := range chain {
		keep := false
		for _, n := range novel {
			keep = keep || n.RunID == r.RunID
		}
		if !outbox && len(carriedOutbox(t, r)) > 0 {
			keep, outbox = true, true
		}
		if !fallback && publishActivity(r) {
			keep, fallback = true, true
		}
		if !keep {
			continue
		}
		fx := histories.Fixture{
			File:       histories.FileName("rewards", histories.RewardsRelease, fmt.Sprintf("%s-run%d", name, i+1)),
			WorkflowID: workflowID,
			Release:    histories.RewardsRelease,
			Scenario:   t.Name(),
		}
		if err := histories.Write(filepath.Join("..", "..", "..", "..", "workflows", "testdata"), fx, r.History); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d events)", fx.File, len(r.History.GetEvents()))
	}
}
