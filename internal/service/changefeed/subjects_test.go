package changefeed_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/entityflow/entityflow/internal/service/changefeed"
	"github.com/entityflow/entityflow/internal/testkit/natsserver"
	rewardswf "github.com/entityflow/entityflow/workflows/rewards"
)

// jetStream connects to a NATS server of the test's own and returns its
// JetStream context and a context that ends with the test (30 s at most).
func jetStream(t testing.TB) (context.Context, jetstream.JetStream) {
	t.Helper()
	return connect(t, natsserver.ForTest(t).URL)
}

// connect connects to the NATS server at url until the test ends.
func connect(t testing.TB, url string) (context.Context, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx, js
}

// entity is one entity's changes for the tests: tenant, customer, entity
// run, and the workflow time of its first change.
type entity struct {
	tenant, customer, run string
	from                  time.Time
}

// changes returns the entity's balance changes seq from..to, one a second.
func (e entity) changes(from, to int) []rewardswf.Change {
	var out []rewardswf.Change
	for i := from; i <= to; i++ {
		out = append(out, change(rewardswf.ChangeBalanceChanged, func(c *rewardswf.Change) {
			c.Seq, c.Delta, c.Balance = int64(i), 10, int64(600+10*i)
			c.TenantID, c.CustomerID, c.EntityRunID = e.tenant, e.customer, e.run
			c.WorkflowID = rewardswf.RewardsWorkflowIDFor(e.tenant, e.customer)
			c.At = e.from.Add(time.Duration(i) * time.Second)
		}))
	}
	return out
}

// stored is one message a consumer received: its subject and the change's
// entity run and seq ("run-a:3").
type stored struct{ subject, change string }

// consume reads, with an ordered consumer filtering subjects, every message
// the stream holds there, in the stream's order.
func consume(t *testing.T, ctx context.Context, js jetstream.JetStream, subjects ...string) []stored {
	t.Helper()
	cons, err := js.OrderedConsumer(ctx, changefeed.DefaultStream, jetstream.OrderedConsumerConfig{FilterSubjects: subjects})
	if err != nil {
		t.Fatal(err)
	}
	var out []stored
	for {
		batch, err := cons.Fetch(100, jetstream.FetchMaxWait(500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			var c rewardswf.Change
			if err := json.Unmarshal(m.Data(), &c); err != nil {
				t.Fatalf("message on %s: %v", m.Subject(), err)
			}
			if got := m.Headers().Get(jetstream.MsgIDHeader); got != c.MsgID() {
				t.Errorf("message %s has Nats-Msg-Id %s", c.MsgID(), got)
			}
			out = append(out, stored{m.Subject(), fmt.Sprintf("%s:%d", c.EntityRunID, c.Seq)})
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			t.Fatal(err)
		}
		if n == 0 {
			return out
		}
	}
}

// Against a real NATS server: tenant acme.eu's customer c1 and tenant acme's
// customer eu.c1 (one subject, changes.rewards.acme.eu.c1, before each ID
// became one token) publish to subjects of their own; a consumer filtering
// tenant acme (changes.rewards.acme.>) receives exactly acme's changes, one
// filtering acme.eu exactly acme.eu's, one filtering a customer exactly that
// customer's.
func TestSubjectsKeepTenantsApart(t *testing.T) {
	ctx, js := jetStream(t)
	if err := changefeed.EnsureStream(ctx, js, changefeed.Config{Mode: rewardswf.FeedAll}); err != nil {
		t.Fatal(err)
	}
	p := &changefeed.Publisher{JS: js, Stream: changefeed.DefaultStream, Prefix: changefeed.DefaultPrefix}
	entities := []entity{
		{tenant: "acme.eu", customer: "c1", run: "eu-c1", from: at},
		{tenant: "acme", customer: "eu.c1", run: "acme-eu.c1", from: at},
		{tenant: "acme", customer: "c2", run: "acme-c2", from: at},
	}
	for _, e := range entities {
		if err := p.Publish(ctx, e.changes(1, 3), false); err != nil {
			t.Fatal(err)
		}
	}
	runs := func(msgs []stored) []string {
		var out []string
		for _, m := range msgs {
			out = append(out, m.change)
		}
		return out
	}
	for _, tc := range []struct {
		filter string
		want   []string
	}{
		{"changes.rewards.acme.>", []string{"acme-eu.c1:1", "acme-eu.c1:2", "acme-eu.c1:3", "acme-c2:1", "acme-c2:2", "acme-c2:3"}},
		{"changes.rewards.acme%2Eeu.>", []string{"eu-c1:1", "eu-c1:2", "eu-c1:3"}},
		{"changes.rewards.acme.eu%2Ec1", []string{"acme-eu.c1:1", "acme-eu.c1:2", "acme-eu.c1:3"}},
		{"changes.rewards.acme%2Eeu.c1", []string{"eu-c1:1", "eu-c1:2", "eu-c1:3"}},
		// What a consumer of tenant acme.eu filtered before: nothing is
		// published there any more.
		{"changes.rewards.acme.eu.>", nil},
	} {
		if got := runs(consume(t, ctx, js, tc.filter)); !slices.Equal(got, tc.want) {
			t.Errorf("a consumer of %s receives %v, want %v", tc.filter, got, tc.want)
		}
	}
}

// The migration of a stream the releases before each ID became one token
// wrote to, against a real NATS server: their stream is used as it is; a
// dotted ID's changes already there stay on the old subject, its next ones go
// to the new subject, a change published again after the duplicate window
// is not stored twice across the two (the publisher reads the old subject
// too), and a consumer filtering both subjects receives the entity's
// changes once each, in order. An ID without a dot keeps its subject.
func TestPublishMigratesAStreamOfThePreviousRelease(t *testing.T) {
	ctx, js := jetStream(t)
	const window = 100 * time.Millisecond
	// The stream as the previous release's EnsureStream left it, but for a
	// short duplicate window, so that the test can outwait it.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: changefeed.DefaultStream, Subjects: []string{changefeed.DefaultPrefix + ".>"},
		Storage: jetstream.FileStorage, Duplicates: window}); err != nil {
		t.Fatal(err)
	}
	dotted := entity{tenant: "acme.eu", customer: "c.1", run: "dotted", from: at}
	plain := entity{tenant: "t-1", customer: "c-1", run: "plain", from: at}
	const oldSubject, newSubject = "changes.rewards.acme.eu.c.1", "changes.rewards.acme%2Eeu.c%2E1"
	// What the previous release published: the dotted entity's changes 1..3
	// on the subject of its IDs as they are, the plain one's 1..2.
	for _, c := range append(dotted.changes(1, 3), plain.changes(1, 2)...) {
		data, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		subject := oldSubject
		if c.EntityRunID == plain.run {
			subject = "changes.rewards.t-1.c-1"
		}
		msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{jetstream.MsgIDHeader: []string{c.MsgID()}}}
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2 * window)
	// This release takes over with the changes handed to it again: the
	// outbox of a run that continued as new, a retried activity.
	p := &changefeed.Publisher{JS: js, Stream: changefeed.DefaultStream, Prefix: changefeed.DefaultPrefix}
	for _, b := range [][]rewardswf.Change{dotted.changes(2, 5), plain.changes(1, 3)} {
		if err := p.Publish(ctx, b, true); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		filters []string
		want    []stored
	}{
		{[]string{oldSubject}, []stored{{oldSubject, "dotted:1"}, {oldSubject, "dotted:2"}, {oldSubject, "dotted:3"}}},
		{[]string{newSubject}, []stored{{newSubject, "dotted:4"}, {newSubject, "dotted:5"}}},
		{[]string{oldSubject, newSubject}, []stored{{oldSubject, "dotted:1"}, {oldSubject, "dotted:2"}, {oldSubject, "dotted:3"}, {newSubject, "dotted:4"}, {newSubject, "dotted:5"}}},
		{[]string{"changes.rewards.t-1.>"}, []stored{{"changes.rewards.t-1.c-1", "plain:1"}, {"changes.rewards.t-1.c-1", "plain:2"}, {"changes.rewards.t-1.c-1", "plain:3"}}},
	} {
		if got := consume(t, ctx, js, tc.filters...); !slices.Equal(got, tc.want) {
			t.Errorf("a consumer of %v receives %v, want %v", tc.filters, got, tc.want)
		}
	}
	// The worker's EnsureStream takes the old stream as it is (its subjects
	// cover the new subjects), widening only the duplicate window.
	if err := changefeed.EnsureStream(ctx, js, changefeed.Config{Mode: rewardswf.FeedAll}); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, changefeed.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := s.CachedInfo().Config; !slices.Equal(cfg.Subjects, []string{changefeed.DefaultPrefix + ".>"}) || cfg.Duplicates != changefeed.DuplicateWindow {
		t.Errorf("the stream after EnsureStream: subjects %v, duplicate window %v", cfg.Subjects, cfg.Duplicates)
	}
}

// A customer unenrolled and enrolled again is a new entity on the same
// subject (the same workflow ID, another entity run). Against a real NATS
// server, after the duplicate window: a publication of the old entity that
// outlived it (its changes all stored, the new entity's first one after
// them) stores nothing again, where reading the new entity's last message as
// "none of mine" stored 3..5 again (8 of the old entity's changes, want 5);
// the new entity's own publication again stores only what is missing.
func TestPublishOfAReenrolledCustomerStoresEachChangeOnce(t *testing.T) {
	ctx, js := jetStream(t)
	const window = 100 * time.Millisecond
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: changefeed.DefaultStream, Subjects: []string{changefeed.DefaultPrefix + ".>"}, Duplicates: window}); err != nil {
		t.Fatal(err)
	}
	p := &changefeed.Publisher{JS: js, Stream: changefeed.DefaultStream, Prefix: changefeed.DefaultPrefix}
	old := entity{tenant: "acme", customer: "c-1", run: "run-a", from: at}
	reenrolled := entity{tenant: "acme", customer: "c-1", run: "run-b", from: at.Add(time.Hour)}
	for _, step := range []struct {
		batch []rewardswf.Change
		again bool
	}{
		{old.changes(1, 5), false},       // the old entity's changes, all stored before it ended
		{reenrolled.changes(1, 1), true}, // the new entity's first (again: its first attempt failed)
		{old.changes(3, 5), true},        // the old entity's last publication, retried after the window
		{reenrolled.changes(1, 2), true}, // the new entity's, again after the window
		{reenrolled.changes(2, 3), true},
	} {
		time.Sleep(2 * window)
		if err := p.Publish(ctx, step.batch, step.again); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, m := range consume(t, ctx, js, changefeed.DefaultPrefix+".>") {
		got = append(got, m.change)
	}
	want := []string{"run-a:1", "run-a:2", "run-a:3", "run-a:4", "run-a:5", "run-b:1", "run-b:2", "run-b:3"}
	if !slices.Equal(got, want) {
		t.Fatalf("the stream holds %v (%d), want %v (%d)", got, len(got), want, len(want))
	}
}
