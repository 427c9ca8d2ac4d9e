package ingest_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/entityflow/entityflow/internal/service/ingress"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// message is one point event of a workload, published once or twice.
type message struct {
	subject string
	body    []byte
	msgID   [2]string // per copy
	once    bool
}

// poisonMessage is a message that can never be applied, with its reason.
type poisonMessage struct {
	subject, body, msgID, reason string
}

// customerOf is one customer of a workload and the events it must end with.
type customerOf struct {
	tenant, id string
	sum        int64    // lifetime points
	events     []string // source IDs, in the order published
	balance    int64    // points at the end
}

// workload is the 10,000-event mix of TestIngressSIGKILLedMidStream and one
// customer's 200 ordered messages: 50 point events for each of 200
// customers of two tenants, every one published twice (the second copy
// after the streams' duplicate window, with the same Nats-Msg-Id or, for
// events with a key of their own, another one or none), but for one event
// per customer that has no key at all (its stream sequence is its key) and
// is published once, each customer's last event redeeming its whole
// balance; 8 poison messages; and customer "solo", whose 200 events
// alternate an award and the redemption of exactly that award (a
// redemption overtaking its award would be refused). A customer's events
// must be applied in the order published: checkApplied reads the order from
// the entity's history.
type workload struct {
	first, second []message
	poison        []poisonMessage
	customers     []customerOf
}

const (
	mixCustomers = 200
	soloEvents   = 200
	// fullPerCustomer is the events each mix customer gets in the SIGKILL
	// test (20,208 messages in all); rollingPerCustomer those of the rolling
	// test, whose two handovers need far fewer to overlap the stream (8,208).
	fullPerCustomer    = 50
	rollingPerCustomer = 20
)

// newWorkload builds a workload of mixCustomers customers with perCustomer
// events each (the last a redemption of all the rest), the solo customer's
// soloEvents interleaved, and the poison messages.
func newWorkload(t testing.TB, prefix string, perCustomer int) *workload {
	w := &workload{}
	tenantOf := func(c int) string {
		if c%4 == 0 {
			return "t-2"
		}
		return "default"
	}
	customer := func(c int) string { return fmt.Sprintf("k-%03d", c) }
	subject := func(c int) string { return ingress.PointsSubject(prefix, tenantOf(c), customer(c)) }
	for c := range mixCustomers {
		w.customers = append(w.customers, customerOf{tenant: tenantOf(c), id: customer(c)})
	}
	var msgs []message
	for i := range perCustomer - 1 {
		for c := range mixCustomers {
			n := i*mixCustomers + c
			ev := rewards.PointEvent{Activity: "purchase", Points: int64(n%9 + 1), SourceID: strconv.Itoa(n)}
			w.customers[c].sum += ev.Points
			w.customers[c].events = append(w.customers[c].events, ev.SourceID)
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
	for c := range mixCustomers { // redeem everything: refused unless every earlier event came first
		cu := &w.customers[c]
		ev := rewards.PointEvent{DedupKey: "redeem-" + cu.id, Activity: "redeem", Points: -cu.sum, SourceID: "redeem-" + cu.id}
		cu.events = append(cu.events, ev.SourceID)
		msgs = append(msgs, message{subject: subject(c), body: mustJSON(t, ev)})
	}
	// The solo customer's events, interleaved with the mix.
	solo := customerOf{tenant: "default", id: "solo"}
	soloSubject := ingress.PointsSubject(prefix, "default", "solo")
	every := len(msgs) / soloEvents
	for i := range soloEvents {
		k := int64(i/2 + 1)
		ev := rewards.PointEvent{DedupKey: fmt.Sprintf("solo-%d", i), Activity: "purchase", Points: k, SourceID: fmt.Sprintf("solo-%d", i)}
		if i%2 == 1 {
			ev.Activity, ev.Points = "redeem", -k
		} else {
			solo.sum += k
		}
		solo.events = append(solo.events, ev.SourceID)
		at := i*every + every/2 + i // after the i-th chunk of the mix (and the solo messages before it)
		m := message{subject: soloSubject, body: mustJSON(t, ev), msgID: [2]string{fmt.Sprintf("s-%d", i), fmt.Sprintf("s-%d", i)}}
		msgs = slices.Insert(msgs, at, m)
	}
	w.customers = append(w.customers, solo)
	for _, m := range msgs {
		w.first = append(w.first, m)
		if !m.once {
			w.second = append(w.second, m)
		}
	}
	w.poison = []poisonMessage{
		{subject(1), `{"points": 5`, "p-json", ingress.ReasonInvalidPayload},
		{subject(2), `{"dedup_key": "z", "points": 0}`, "p-zero", ingress.ReasonInvalidPayload},
		{subject(3), `{"points": 5, "colour": "red"}`, "p-field", ingress.ReasonInvalidPayload},
		{prefix + ".default.c%2e1.points", `{"points": 5}`, "p-subject", ingress.ReasonInvalidSubject}, // a token no ID has
		{ingress.PointsSubject(prefix, "t-9", customer(1)), `{"points": 5}`, "p-tenant", ingress.ReasonUnknownTenant},
		{subject(0), `{"dedup_key": "d-0", "points": 99}`, "p-reused", ingress.ReasonKeyReused},
		{subject(5), `{"dedup_key": "overdraw", "points": -100000}`, "p-overdraw", ingress.ReasonInvalidEvent},
		{ingress.PointsSubject(prefix, "default", "gone"), `{"dedup_key": "g-2", "points": 5}`, "p-gone", ingress.ReasonNotEnrolled},
	}
	return w
}

// total is how many messages the workload publishes.
func (w *workload) total() int { return len(w.first) + len(w.second) + len(w.poison) }

// unenrollGone makes the customer "gone", who unenrolled before the
// stream reaches them (p-gone).
func unenrollGone(t testing.TB, ctx context.Context, c client.Client, rc *rewardsclient.Client) {
	t.Helper()
	gone := rc.For("default")
	if _, err := gone.ApplyPoints(ctx, "gone", rewards.PointEvent{DedupKey: "g-1", Points: 5}); err != nil {
		t.Fatal(err)
	}
	if err := gone.Unenroll(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if err := c.GetWorkflow(ctx, rewards.RewardsWorkflowID("gone"), "").Get(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

// publishBatch publishes msgs' copy (0 or 1) asynchronously, at most
// publishWindow acks outstanding (nats.go stalls past its own bound, 4,000,
// when the server is slow to ack), and fails the test unless JetStream
// stored every one.
func publishBatch(t testing.TB, js jetstream.JetStream, msgs []message, copyIndex int) {
	t.Helper()
	for len(msgs) > 0 {
		n := min(publishWindow, len(msgs))
		if !publishWindowed(t, js, msgs[:n], copyIndex) {
			return
		}
		msgs = msgs[n:]
	}
}

// publishWindow is how many acks publishBatch waits for at a time.
const publishWindow = 1000

// publishWindowed publishes msgs' copy and waits for every ack; it reports
// whether publishing went on to the end.
func publishWindowed(t testing.TB, js jetstream.JetStream, msgs []message, copyIndex int) bool {
	t.Helper()
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	for _, m := range msgs {
		nm := nats.NewMsg(m.subject)
		nm.Data = m.body
		if id := m.msgID[copyIndex]; id != "" {
			nm.Header.Set(nats.MsgIdHdr, id)
		}
		f, err := js.PublishMsgAsync(nm)
		if err != nil {
			t.Errorf("publishing: %v", err)
			return false
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case ack := <-f.Ok():
			if ack.Duplicate {
				t.Errorf("JetStream dropped %s (Nats-Msg-Id %q) as a duplicate", f.Msg().Subject, f.Msg().Header.Get(nats.MsgIdHdr))
			}
		case err := <-f.Err():
			t.Errorf("publishing %s: %v", f.Msg().Subject, err)
		}
	}
	return true
}

// publishAll publishes the first copies and the poison messages, waits out
// the streams' duplicate window (1 s in the tests), then publishes the
// second copies at perSecond messages a second (0: all at once).
func (w *workload) publishAll(t testing.TB, e *env, perSecond int) {
	publishBatch(t, e.js, w.first, 0)
	for _, p := range w.poison {
		e.publish(p.subject, []byte(p.body), p.msgID)
	}
	time.Sleep(1500 * time.Millisecond)
	if perSecond <= 0 {
		publishBatch(t, e.js, w.second, 1)
		return
	}
	chunk := max(perSecond/10, 1)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for rest := w.second; len(rest) > 0; {
		n := min(chunk, len(rest))
		publishBatch(t, e.js, rest[:n], 1)
		rest = rest[n:]
		<-tick.C
	}
}

// check verifies the end state: every customer's entity holds exactly its
// distinct events, applied in the order published (its history), and the
// dead-letter stream holds the poison messages only, each once.
func (w *workload) check(t *testing.T, ctx context.Context, e *env, c client.Client, rc *rewardsclient.Client) {
	t.Helper()
	outOfOrder := 0
	for _, cu := range w.customers {
		st, err := rc.For(cu.tenant).Status(ctx, cu.id)
		if err != nil {
			t.Fatal(err)
		}
		if st.Points != cu.balance || st.LifetimePoints != cu.sum || st.EventCount != int64(len(cu.events)) {
			t.Errorf("%s/%s: points %d, lifetime %d, events %d; want %d, %d, %d",
				cu.tenant, cu.id, st.Points, st.LifetimePoints, st.EventCount, cu.balance, cu.sum, len(cu.events))
		}
		applied := appliedSources(t, ctx, c, rewards.RewardsWorkflowIDFor(cu.tenant, cu.id))
		if !slices.Equal(applied, cu.events) {
			outOfOrder++
			if outOfOrder <= 3 {
				t.Errorf("%s/%s: events applied in the order %v, want %v", cu.tenant, cu.id, applied, cu.events)
			}
			if outOfOrder == 1 {
				logUpdates(t, ctx, c, rewards.RewardsWorkflowIDFor(cu.tenant, cu.id))
			}
		}
	}
	if outOfOrder > 0 {
		t.Errorf("%d of %d customers' events applied out of order", outOfOrder, len(w.customers))
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
		if want := e.cfg.DeadLetterPrefix + "." + h.Get(ingress.HeaderSubject); m.Subject() != want {
			t.Errorf("dead letter %q on %s, want %s (the subject it was published on)", id, m.Subject(), want)
		}
	}
	var diffs []string
	for _, p := range w.poison {
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
}

// appliedSources returns the source IDs of the point events a rewards entity
// applied, every run from the first, in the order it accepted them (a
// redelivery, answered as a duplicate, counted at its first acceptance; an
// update that failed, such as a refused redemption, left out).
func appliedSources(t testing.TB, ctx context.Context, c client.Client, workflowID string) []string {
	t.Helper()
	var runs [][]string
	for runID := ""; ; {
		var ids, updates []string
		var items []int // each id's place in its update's events
		failed := map[string]bool{}
		itemFailed := map[string][]bool{} // per batch update, its events refused
		previous := ""
		it := c.GetWorkflowHistory(ctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				t.Fatalf("history of %s: %v", workflowID, err)
			}
			if a := ev.GetWorkflowExecutionStartedEventAttributes(); a != nil {
				previous = a.GetContinuedExecutionRunId()
			}
			if a := ev.GetWorkflowExecutionUpdateCompletedEventAttributes(); a != nil {
				if a.GetOutcome().GetFailure() != nil {
					failed[a.GetMeta().GetUpdateId()] = true
				} else if refused := batchRefusals(a.GetOutcome().GetSuccess()); refused != nil {
					itemFailed[a.GetMeta().GetUpdateId()] = refused
				}
			}
			events, ok := acceptedEvents(t, ev.GetWorkflowExecutionUpdateAcceptedEventAttributes())
			if !ok {
				continue
			}
			for i, pe := range events {
				ids = append(ids, pe.SourceID)
				updates = append(updates, ev.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest().GetMeta().GetUpdateId())
				items = append(items, i)
			}
		}
		var ok []string
		for i, id := range ids {
			refused := itemFailed[updates[i]]
			if !failed[updates[i]] && (items[i] >= len(refused) || !refused[items[i]]) {
				ok = append(ok, id)
			}
		}
		runs = append(runs, ok)
		if previous == "" {
			break
		}
		runID = previous
	}
	seen := map[string]bool{}
	var order []string
	for i := len(runs) - 1; i >= 0; i-- {
		for _, id := range runs[i] {
			if !seen[id] {
				seen[id] = true
				order = append(order, id)
			}
		}
	}
	return order
}

// acceptedEvents returns the point events of an accepted apply-points or
// apply-points-batch update, in order; ok is false for any other event.
func acceptedEvents(t testing.TB, a *historypb.WorkflowExecutionUpdateAcceptedEventAttributes) (events []rewards.PointEvent, ok bool) {
	t.Helper()
	input := a.GetAcceptedRequest().GetInput()
	dc := converter.GetDefaultDataConverter()
	switch input.GetName() {
	case rewards.UpdateApplyPoints:
		var pe rewards.PointEvent
		if err := dc.FromPayloads(input.GetArgs(), &pe); err != nil {
			t.Fatalf("apply-points input: %v", err)
		}
		return []rewards.PointEvent{pe}, true
	case rewards.UpdateApplyPointsBatch:
		var b rewards.PointEventBatch
		if err := dc.FromPayloads(input.GetArgs(), &b); err != nil {
			t.Fatalf("apply-points-batch input: %v", err)
		}
		return b.Events, true
	}
	return nil, false
}

// batchRefusals returns, for a completed apply-points-batch update's
// result, which of its events were refused; nil for any other result.
func batchRefusals(result *commonpb.Payloads) []bool {
	var res rewards.BatchResult
	if err := converter.GetDefaultDataConverter().FromPayloads(result, &res); err != nil || res.Results == nil {
		return nil
	}
	refused := make([]bool, len(res.Results))
	for i, r := range res.Results {
		refused[i] = r.Error != nil
	}
	return refused
}

// logUpdates logs the apply-points updates of a rewards entity's runs as
// its history holds them: when accepted, the event, the update ID, the
// outcome.
func logUpdates(t testing.TB, ctx context.Context, c client.Client, workflowID string) {
	t.Helper()
	for runID := ""; ; {
		previous := ""
		it := c.GetWorkflowHistory(ctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				t.Logf("history of %s: %v", workflowID, err)
				return
			}
			if a := ev.GetWorkflowExecutionStartedEventAttributes(); a != nil {
				previous = a.GetContinuedExecutionRunId()
				t.Logf("%s run %s started %v", workflowID, runID, ev.GetEventTime().AsTime())
			}
			if a := ev.GetWorkflowExecutionUpdateCompletedEventAttributes(); a != nil {
				t.Logf("  %v completed %s failure=%v", ev.GetEventTime().AsTime().Format("15:04:05.000"), a.GetMeta().GetUpdateId(), a.GetOutcome().GetFailure().GetMessage())
			}
			if a := ev.GetWorkflowExecutionUpdateAcceptedEventAttributes(); a != nil {
				events, _ := acceptedEvents(t, a)
				for _, pe := range events {
					t.Logf("  %v accepted %s %s key %s", ev.GetEventTime().AsTime().Format("15:04:05.000"), a.GetAcceptedRequest().GetMeta().GetUpdateId(), pe.SourceID, pe.DedupKey)
				}
			}
		}
		if previous == "" {
			return
		}
		runID = previous
	}
}
