package feed_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	rewardsact "github.com/entityflow/entityflow/activities/rewards"
	"github.com/entityflow/entityflow/internal/service/changefeed"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/internal/service/rewardsworker"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
	"github.com/entityflow/entityflow/internal/testkit/natsserver"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// The environment of the worker process that dies mid-publish: set, the
// test binary runs that worker (TestMain) instead of the tests.
const (
	dyingWorkerTemporal = "FEED_DYING_WORKER_TEMPORAL"
	dyingWorkerNATS     = "FEED_DYING_WORKER_NATS"
)

// TestMain runs the tests, or, in the process that
// TestFeedWorkerDiedMidPublishPastTheWindow starts, the worker that dies.
func TestMain(m *testing.M) {
	if addr := os.Getenv(dyingWorkerTemporal); addr != "" {
		if err := runDyingWorker(addr, os.Getenv(dyingWorkerNATS)); err != nil {
			fmt.Fprintln(os.Stderr, "dying worker:", err)
			os.Exit(2)
		}
	}
	os.Exit(m.Run())
}

// runDyingWorker runs a rewards worker (feed all) whose first publication
// sends its first change and then ends the process, before the local
// activity returns and so before its workflow task completes: a worker
// that died mid-publish. It returns only on an error.
func runDyingWorker(temporalAddr, natsURL string) error {
	c, err := client.Dial(client.Options{HostPort: temporalAddr})
	if err != nil {
		return err
	}
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	pub := &changefeed.Publisher{JS: js, Stream: changefeed.DefaultStream, Prefix: changefeed.DefaultPrefix}
	w := rewardsworker.NewWithFeed(c, "default", rewardsact.LogRecorder{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		rewardsworker.Feed{Mode: rewards.FeedAll, Publisher: diesMidPublish{pub}}, worker.Options{})
	if err := w.Start(); err != nil {
		return err
	}
	select {}
}

// diesMidPublish publishes the first change of its first publication and
// ends the process.
type diesMidPublish struct{ *changefeed.Publisher }

func (d diesMidPublish) Publish(ctx context.Context, changes []rewards.Change, again bool) error {
	err := d.Publisher.Publish(ctx, changes[:1], again)
	fmt.Fprintf(os.Stderr, "dying worker: published change %d of %d (%v); dying\n", changes[0].Seq, changes[len(changes)-1].Seq, err)
	os.Exit(3)
	return nil
}

// The suspected bug of issue 27, on a real dev server and NATS server whose
// stream has a duplicate window of 1 s: the only worker dies mid-publish,
// after its first publication sent the entity's first change and before
// its workflow task completed (the local activity left no trace in
// history); every worker stays down past the duplicate window; the worker
// that then takes the task over publishes the same changes again as a
// first attempt. The stream still holds each change once: every
// publication reads the stream's last change first.
func TestFeedWorkerDiedMidPublishPastTheWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a NATS server and a Temporal dev server")
	}
	ns := natsserver.ForTest(t)
	srv := devserver.ForTest(t, devserver.Options{})
	tc := srv.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	nc, err := nats.Connect(ns.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const window = time.Second
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: changefeed.DefaultStream,
		Subjects: []string{changefeed.DefaultPrefix + ".>"}, Duplicates: window}); err != nil {
		t.Fatal(err)
	}

	dying := exec.Command(os.Args[0], "-test.run=^$")
	dying.Env = append(os.Environ(), dyingWorkerTemporal+"="+srv.FrontendHostPort(), dyingWorkerNATS+"="+ns.URL)
	dying.Stdout, dying.Stderr = t.Output(), t.Output()
	dying.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := dying.Start(); err != nil {
		t.Fatal(err)
	}
	const cust = "feed-died"
	id := rewards.RewardsWorkflowID(cust)
	// A short workflow task timeout: the dead worker's task is handed on
	// after 2 s rather than 10.
	if _, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: rewards.RewardsTaskQueue, WorkflowTaskTimeout: 2 * time.Second},
		rewards.RewardsWorkflowType, rewards.RewardsInput{CustomerID: cust}); err != nil {
		t.Fatal(err)
	}
	if err := dying.Wait(); err == nil {
		t.Fatal("the dying worker exited cleanly")
	}
	if got := len(readStream(t, ctx, connectReader(t, ns.URL), window)); got != 1 {
		t.Fatalf("the dying worker left %d changes in the stream, want 1", got)
	}
	time.Sleep(3 * window) // every worker down past the duplicate window

	pub := &changefeed.Publisher{JS: js, Stream: changefeed.DefaultStream, Prefix: changefeed.DefaultPrefix}
	w := rewardsworker.NewWithFeed(tc, "default", rewardsact.LogRecorder{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		rewardsworker.Feed{Mode: rewards.FeedAll, Publisher: pub}, worker.Options{})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	rc := &rewardsclient.Client{Temporal: tc, AttemptTimeout: 10 * time.Second, Attempts: 60}
	if _, err := rc.ApplyPoints(ctx, cust, rewards.PointEvent{DedupKey: "k-1", Activity: "purchase", Points: 600}); err != nil {
		t.Fatal(err)
	}
	if err := rc.Unenroll(ctx, cust); err != nil {
		t.Fatal(err)
	}
	var st rewards.Status
	if err := tc.GetWorkflow(ctx, id, "").Get(ctx, &st); err != nil {
		t.Fatal(err)
	}
	msgs := readStream(t, ctx, connectReader(t, ns.URL), window)
	for _, m := range msgs {
		t.Logf("stream: %s %s", m.msgID, m.change.Kind)
	}
	// enrolled, balance_changed, tier_changed, unenrolled
	if n := check(t, msgs, []string{id}); n != 4 {
		t.Fatalf("%d changes in the stream, want 4", n)
	}
	recordIfAsked(t, tc, cust, "feed-died")
}
