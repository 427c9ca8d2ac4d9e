package rewards_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/entityflow/entityflow/workflows/rewards"
)

// stream stands for the feed's JetStream stream and its publisher: it
// keeps the first publication of each message ID within the duplicate
// window (ids; expire ends the window) and counts the duplicates it drops;
// a publication told again first skips the changes up to the last one the
// stream holds, as changefeed.Publisher does, and counts them. fail, if
// set, decides per call (numbered from 1) how many of the batch's changes
// go out before the call fails (-1: none fails).
type stream struct {
	mu      sync.Mutex
	stored  []rewards.Change
	ids     map[string]bool
	dups    int
	skipped int
	calls   int
	sizes   []int
	fail    func(call int) int
	// unflagged counts changes the stream held already (within the window
	// or not) that came in a publication not marked again: the publisher
	// would not have looked.
	unflagged int
}

func (s *stream) Publish(_ context.Context, changes []rewards.Change, again bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	for _, c := range changes {
		if !again && c.Seq <= s.lastStored() {
			s.unflagged++
		}
	}
	s.sizes = append(s.sizes, len(changes))
	upTo := len(changes)
	if s.fail != nil {
		if n := s.fail(s.calls); n >= 0 {
			upTo = min(n, len(changes))
		}
	}
	if s.ids == nil {
		s.ids = map[string]bool{}
	}
	last := int64(0)
	if again {
		last = s.lastStored()
	}
	for _, c := range changes[:upTo] {
		if c.Seq <= last {
			s.skipped++
			continue
		}
		if s.ids[c.MsgID()] {
			s.dups++
			continue
		}
		s.ids[c.MsgID()] = true
		s.stored = append(s.stored, c)
	}
	if upTo < len(changes) {
		return errors.New("NATS unavailable")
	}
	return nil
}

// expire forgets the message IDs of the duplicate window, as JetStream does
// once the window has passed: a change published again after it is stored
// again unless the publisher, told again, first reads what the stream holds.
func (s *stream) expire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids = nil
}

// lastStored is the seq of the last change the stream holds (0: none),
// what the publisher reads when told again.
func (s *stream) lastStored() int64 {
	if len(s.stored) == 0 {
		return 0
	}
	return s.stored[len(s.stored)-1].Seq
}

// check verifies the stream holds seq 1..n of workflowID in order, each
// message ID once, and returns the kinds in order.
func (s *stream) check(t *testing.T, workflowID string) []rewards.ChangeKind {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unflagged > 0 {
		t.Fatalf("%d changes the stream held came again in publications not marked again", s.unflagged)
	}
	var kinds []rewards.ChangeKind
	for i, c := range s.stored {
		// The test environment reports no first run ID; the real server's is
		// checked by the integration tests (internal/tests/integration/feed).
		if c.EntityRunID != s.stored[0].EntityRunID {
			t.Fatalf("stream position %d holds entity run %q, want the first run of the chain (%q)", i, c.EntityRunID, s.stored[0].EntityRunID)
		}
		if c.Seq != int64(i+1) || c.WorkflowID != workflowID || c.MsgID() != fmt.Sprintf("%s:%s:%d", workflowID, c.EntityRunID, i+1) {
			t.Fatalf("stream position %d holds %+v, want seq %d of %s", i, c, i+1, workflowID)
		}
		kinds = append(kinds, c.Kind)
	}
	return kinds
}

func feedEntity(t *testing.T, mode rewards.FeedMode) (*entity, *stream) {
	h := newEntity(t)
	s := &stream{}
	h.feed, h.changes = mode, s
	return h, s
}

// Through several ContinueAsNew, with a publisher that fails a batch
// half-way now and then, the stream holds every change once, numbered
// 1..n in order: enrolled first, the tier changes where the balance
// crossed a threshold, every balance change (all), unenrolled last, which
// is published before the last run ends.
func TestFeedInOrderThroughContinueAsNew(t *testing.T) {
	h, s := feedEntity(t, rewards.FeedAll)
	s.fail = func(call int) int {
		if call%3 == 0 {
			return 1 // one change out, then the publish fails
		}
		return -1
	}
	in := rewards.RewardsInput{CustomerID: "c-feed", Options: rewards.Options{EventsPerRun: 7}}
	const events = 30
	last, runs := h.until(in, func(run int, env *testsuite.TestWorkflowEnvironment) {
		for i := range 7 {
			n := (run-1)*7 + i
			if n >= events {
				unenroll(env, time.Duration(i+1)*time.Minute)
				return
			}
			pts := int64(100) // basic -> gold -> platinum by event 9
			switch {
			case n == 20:
				pts = -1950 // platinum -> basic
			case n > 20:
				pts = 1
			}
			signal(env, time.Duration(i+1)*time.Minute, event(fmt.Sprint("k-", n), pts))
		}
	})
	if last.err != nil {
		t.Fatal(last.err)
	}
	if len(runs) < 4 {
		t.Fatalf("%d runs, want ContinueAsNew between the events", len(runs))
	}
	kinds := s.check(t, rewards.RewardsWorkflowID("c-feed"))
	var tiers, balances int
	for _, k := range kinds {
		switch k {
		case rewards.ChangeTierChanged:
			tiers++
		case rewards.ChangeBalanceChanged:
			balances++
		}
	}
	if kinds[0] != rewards.ChangeEnrolled || kinds[len(kinds)-1] != rewards.ChangeUnenrolled || tiers != 3 || balances != events {
		t.Fatalf("kinds %v: want enrolled first, unenrolled last, 3 tier changes, %d balance changes", kinds, events)
	}
	if s.dups+s.skipped == 0 {
		t.Fatal("no publish failed half-way; the test did not test retries")
	}
	if len(h.rec.unenrolled) != 1 {
		t.Fatalf("unenrollments recorded: %d", len(h.rec.unenrolled))
	}
	t.Logf("%d changes in %d runs, %d publish calls, %d duplicates dropped, %d skipped", len(kinds), len(runs), s.calls, s.dups, s.skipped)
}

// Changes not yet published when the run continues as new (the publisher
// down) are carried in the next run's input with the sequence, and the
// next run publishes them first, under the same message IDs.
func TestFeedCarriesTheOutboxThroughContinueAsNew(t *testing.T) {
	h, s := feedEntity(t, rewards.FeedChanges)
	// The first run's publish activity may still be retrying when the
	// test brings the publisher back.
	var down atomic.Bool
	down.Store(true)
	s.fail = func(int) int {
		if down.Load() {
			return 0
		}
		return -1
	}
	in := rewards.RewardsInput{CustomerID: "c-carry", Options: rewards.Options{EventsPerRun: 3}}
	first := h.run(in, func(env *testsuite.TestWorkflowEnvironment) {
		for i := range 3 {
			signal(env, time.Duration(i+1)*time.Second, event(fmt.Sprint("k-", i), 400))
		}
	})
	if first.next == nil || first.next.Carried == nil {
		t.Fatalf("run 1 did not continue as new: %+v", first)
	}
	carried := first.next.Carried
	// enrolled, basic->gold (800), gold->platinum (1200)
	if carried.FeedSeq != 3 || len(carried.Outbox) != 3 || carried.Outbox[0].Seq != 1 || carried.Outbox[2].Kind != rewards.ChangeTierChanged {
		t.Fatalf("carried feed_seq %d, outbox %+v: want the 3 changes unpublished", carried.FeedSeq, carried.Outbox)
	}
	raw, err := json.Marshal(first.next)
	if err != nil {
		t.Fatal(err)
	}
	var back rewards.RewardsInput
	if err := json.Unmarshal(raw, &back); err != nil || back.Carried == nil || len(back.Carried.Outbox) != 3 {
		t.Fatalf("the ContinueAsNew input does not decode strictly: %v", err)
	}
	down.Store(false)
	second := h.run(*first.next, func(env *testsuite.TestWorkflowEnvironment) {
		signal(env, time.Minute, event("k-3", -1000))
		unenroll(env, 2*time.Minute)
	})
	if second.err != nil || second.next != nil {
		t.Fatalf("run 2: %+v", second)
	}
	kinds := s.check(t, rewards.RewardsWorkflowID("c-carry"))
	want := []rewards.ChangeKind{rewards.ChangeEnrolled, rewards.ChangeTierChanged, rewards.ChangeTierChanged, rewards.ChangeTierChanged, rewards.ChangeUnenrolled}
	if fmt.Sprint(kinds) != fmt.Sprint(want) {
		t.Fatalf("stream kinds %v, want %v", kinds, want)
	}
}

// A burst of 500 events in one batch costs a bounded number of publish
// activities (about 500/MaxChangesPerPublish + 1), not one an event.
func TestFeedBatchesABurst(t *testing.T) {
	h, s := feedEntity(t, rewards.FeedAll)
	in := rewards.RewardsInput{CustomerID: "c-burst", Options: rewards.Options{EventsPerRun: 10_000}}
	var evs []rewards.PointEvent
	for i := range 500 {
		evs = append(evs, event(fmt.Sprint("b-", i), 1))
	}
	out := &batchOutcome{}
	res := h.run(in, func(env *testsuite.TestWorkflowEnvironment) {
		env.RegisterDelayedCallback(func() { sendBatch(env, "burst", rewards.PointEventBatch{Events: evs}, out) }, time.Second)
		unenroll(env, time.Minute)
	})
	if res.err != nil || out.err != nil {
		t.Fatalf("run: %v, batch: %v", res.err, out.err)
	}
	kinds := s.check(t, rewards.RewardsWorkflowID("c-burst"))
	// enrolled, 500 balance changes, basic->gold, unenrolled
	if len(kinds) != 503 {
		t.Fatalf("%d changes, want 503", len(kinds))
	}
	// The enrolled change goes out alone before the burst, and the
	// unenrolled one alone a minute after it.
	if burst := s.calls - 2; burst > 502/rewards.MaxChangesPerPublish+1 {
		t.Fatalf("%d publish activities for the burst's 502 changes (sizes %v)", burst, s.sizes)
	}
	t.Logf("503 changes in %d publish activities of %v changes", s.calls, s.sizes)
}

// With the feed off the entity publishes nothing and hands on no feed
// state: its ContinueAsNew input is what release 5 wrote.
func TestFeedOffWritesNothingNew(t *testing.T) {
	h, s := feedEntity(t, rewards.FeedOff)
	in := rewards.RewardsInput{CustomerID: "c-off", Options: rewards.Options{EventsPerRun: 3}}
	res := h.run(in, func(env *testsuite.TestWorkflowEnvironment) {
		for i := range 3 {
			signal(env, time.Duration(i+1)*time.Second, event(fmt.Sprint("k-", i), 400))
		}
	})
	if res.next == nil {
		t.Fatal("no ContinueAsNew")
	}
	raw, err := json.Marshal(res.next)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "feed_seq") || strings.Contains(string(raw), "outbox") || s.calls != 0 {
		t.Fatalf("feed off: %d publish calls, ContinueAsNew input %s", s.calls, raw)
	}
}

// The unenrolled change goes out before the run ends, however long the
// publisher fails: the run waits for its outbox to empty.
func TestFeedPublishesUnenrolledBeforeTheEnd(t *testing.T) {
	h, s := feedEntity(t, rewards.FeedChanges)
	s.fail = func(call int) int {
		if call <= 4 {
			return 0
		}
		return -1
	}
	in := rewards.RewardsInput{CustomerID: "c-leave"}
	res := h.run(in, func(env *testsuite.TestWorkflowEnvironment) {
		signal(env, time.Second, event("k-0", 600))
		unenroll(env, 2*time.Second)
	})
	if res.err != nil || res.next != nil {
		t.Fatalf("run: %+v", res)
	}
	kinds := s.check(t, rewards.RewardsWorkflowID("c-leave"))
	want := []rewards.ChangeKind{rewards.ChangeEnrolled, rewards.ChangeTierChanged, rewards.ChangeUnenrolled}
	if fmt.Sprint(kinds) != fmt.Sprint(want) || s.calls < 5 {
		t.Fatalf("stream kinds %v after %d calls, want %v after the failures", kinds, s.calls, want)
	}
}

// dyingStream is the stream as a worker sees it that dies mid-publish: its
// first publication of more than one change sends the first of them, then
// the worker dies (die), its workflow task never completed; earlier
// publications go through.
type dyingStream struct {
	*stream
	die  func()
	dead chan struct{}
	once sync.Once
}

func (d *dyingStream) Publish(ctx context.Context, changes []rewards.Change, again bool) error {
	dies := false
	if len(changes) > 1 {
		d.once.Do(func() { dies = true })
	}
	if !dies {
		return d.stream.Publish(ctx, changes, again)
	}
	_ = d.stream.Publish(ctx, changes[:1], again)
	d.die()
	select {
	case <-ctx.Done():
	case <-d.dead:
	}
	return errors.New("the worker died")
}

// The suspected bug of issue 27: a first publication whose worker died
// mid-publish leaves no trace in history (a local activity is recorded only
// when its workflow task completes), so the worker that takes the task over
// runs the same publication again, of the same changes under the same
// message IDs, as a first attempt. When that happens after the stream's
// duplicate window (every worker down for longer), JetStream no longer
// drops the changes already sent: unless told to read the stream first
// (Again), the publisher stores them twice. Run 1 below is the worker that
// died, run 2 the same workflow task replayed after the window.
func TestFeedFirstPublicationRepeatedAfterTheWindow(t *testing.T) {
	h, s := feedEntity(t, rewards.FeedAll)
	const cust = "c-window"
	id := rewards.RewardsWorkflowID(cust)
	// The entity's enrolled change went out long ago.
	s.stored = []rewards.Change{{Seq: 1, Kind: rewards.ChangeEnrolled, WorkflowID: id}}
	in := rewards.RewardsInput{CustomerID: cust, Carried: &rewards.RewardsState{Run: 2, EnrollRecorded: true, NotifiedTier: rewards.TierBasic, FeedSeq: 1}}
	// 3 balance changes and a tier change: one publication of 4 changes.
	evs := rewards.PointEventBatch{Events: []rewards.PointEvent{event("k-1", 200), event("k-2", 200), event("k-3", 200)}}

	dying := &dyingStream{stream: s, dead: make(chan struct{})}
	t.Cleanup(func() { close(dying.dead) })
	h.changes = dying
	h.prepare = func(_ int, env *testsuite.TestWorkflowEnvironment) { dying.die = env.CancelWorkflow }
	died := h.run(in, func(env *testsuite.TestWorkflowEnvironment) {
		batch(env, time.Second, "events", evs)
	})
	if died.err == nil || len(s.stored) != 2 {
		t.Fatalf("the dying worker's run: %+v, stream %+v; want it cut off after publishing change 2", died, s.stored)
	}

	s.expire() // every worker stayed down past the duplicate window
	h.changes, h.prepare = s, nil
	var out *batchOutcome
	res := h.run(in, func(env *testsuite.TestWorkflowEnvironment) {
		out = batch(env, time.Second, "events", evs)
		unenroll(env, 2*time.Second)
	})
	if res.err != nil || out.err != nil {
		t.Fatalf("the run that replays the task: %v, batch %+v", res.err, out)
	}
	stored := map[int64]int{}
	for _, c := range s.stored {
		if stored[c.Seq]++; stored[c.Seq] > 1 {
			t.Fatalf("change %d stored %d times: the publication replayed after the window did not read the stream first", c.Seq, stored[c.Seq])
		}
	}
	kinds := s.check(t, id)
	want := []rewards.ChangeKind{rewards.ChangeEnrolled, rewards.ChangeBalanceChanged, rewards.ChangeBalanceChanged,
		rewards.ChangeBalanceChanged, rewards.ChangeTierChanged, rewards.ChangeUnenrolled}
	if fmt.Sprint(kinds) != fmt.Sprint(want) {
		t.Fatalf("stream kinds %v, want %v", kinds, want)
	}
}

func TestParseFeedMode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want rewards.FeedMode
		ok   bool
	}{
		{"", rewards.FeedOff, true}, {"off", rewards.FeedOff, true}, {"changes", rewards.FeedChanges, true},
		{"all", rewards.FeedAll, true}, {"ALL", "", false}, {"on", "", false},
	} {
		got, err := rewards.ParseFeedMode(tc.in)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("ParseFeedMode(%q) = %q, %v", tc.in, got, err)
		}
	}
}

// A run held back to release 5 (RewardsReleaseCap, after a rollback of the
// setting) that is handed unpublished changes publishes them, makes no new
// one, and still completes only once they are out.
func TestFeedOutboxPublishedByARunHeldBack(t *testing.T) {
	h, s := feedEntity(t, rewards.FeedAll)
	h.prepare = func(_ int, env *testsuite.TestWorkflowEnvironment) {
		env.SetWorkerOptions(worker.Options{PreferredVersionProvider: rewards.RewardsReleaseCap(5)})
	}
	id := rewards.RewardsWorkflowID("c-held")
	pending := rewards.Change{Seq: 4, Kind: rewards.ChangeTierChanged, TenantID: "default", CustomerID: "c-held", WorkflowID: id,
		At: start, Cause: rewards.Cause{Type: rewards.CauseEvent, DedupKey: "k-3"}, Balance: 600, From: rewards.TierBasic, To: rewards.TierGold}
	s.ids = map[string]bool{id + ":1": true, id + ":2": true, id + ":3": true}
	s.stored = []rewards.Change{{Seq: 1, WorkflowID: id}, {Seq: 2, WorkflowID: id}, {Seq: 3, WorkflowID: id}}
	in := rewards.RewardsInput{CustomerID: "c-held", Carried: &rewards.RewardsState{Run: 2, Points: 600, EnrollRecorded: true,
		NotifiedTier: rewards.TierGold, FeedSeq: 4, Outbox: []rewards.Change{pending}}}
	res := h.run(in, func(env *testsuite.TestWorkflowEnvironment) {
		signal(env, time.Second, event("k-4", 600))
		unenroll(env, time.Minute)
	})
	if res.err != nil || res.next != nil {
		t.Fatalf("run: %+v", res)
	}
	s.check(t, id)
	if len(s.stored) != 4 || s.stored[3].Kind != rewards.ChangeTierChanged {
		t.Fatalf("stream %+v, want the handed change only", s.stored)
	}
}

// With the outbox full (a NATS outage), add-points signals wait in their
// channel; an unenroll behind them waits until the outbox has room and they
// are applied. (A ContinueAsNew due meanwhile waits the same way, held; the
// test environment delivers simultaneous signals in separate tasks, so it
// cannot put signals in the channel at that moment.)
func TestFeedFullOutboxLosesNoEvent(t *testing.T) {
	h, s := feedEntity(t, rewards.FeedAll)
	s.fail = func(call int) int {
		if call <= 3 {
			return 0 // NATS down for the first three publications
		}
		return -1
	}
	id := rewards.RewardsWorkflowID("c-full")
	outbox := make([]rewards.Change, rewards.MaxOutbox-1)
	for i := range outbox {
		outbox[i] = rewards.Change{Seq: int64(i + 1), Kind: rewards.ChangeBalanceChanged, TenantID: "default", CustomerID: "c-full",
			WorkflowID: id, At: start, Cause: rewards.Cause{Type: rewards.CauseEvent}, Balance: int64(i + 1), Delta: 1}
	}
	in := rewards.RewardsInput{CustomerID: "c-full", Carried: &rewards.RewardsState{Run: 2, Points: 5000, EnrollRecorded: true,
		NotifiedTier: rewards.TierPlatinum, FeedSeq: int64(len(outbox)), Outbox: outbox}}
	res := h.run(in, func(env *testsuite.TestWorkflowEnvironment) {
		for i := range 4 {
			signal(env, time.Second, event(fmt.Sprint("k-", i), 10))
		}
		unenroll(env, 2*time.Second)
	})
	if res.err != nil || res.next != nil {
		t.Fatalf("run: %+v", res)
	}
	if res.status.EventCount != 4 || len(s.stored) != len(outbox)+4+1 {
		t.Fatalf("%d events applied, %d changes published: want the 4 events that waited behind the full outbox, then unenrolled", res.status.EventCount, len(s.stored))
	}
}
