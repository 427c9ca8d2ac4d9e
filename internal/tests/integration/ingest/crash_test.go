package ingest_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
)

// The 10,000-event mix and one customer's 200 ordered messages (workload)
// on three ingress processes (worker -task-queues none -ingest) sharing one
// points stream's 8 partitions, the entities in another process; a third
// of the way through, one of them, holding partitions, is killed with
// SIGKILL (acks of the work it had in flight lost, updates perhaps applied
// and unacked). The other two take its partitions once its pins expire
// (2 s here) and wait, per customer, for what it left unacked (ack wait 5 s
// here). Every entity ends with exactly its distinct events, applied in the
// order published; the dead-letter stream holds the poison messages only.
// The hand-over (from the kill to the first ack of each partition the killed
// process held) and the time to drain are logged.
func TestIngressSIGKILLedMidStream(t *testing.T) {
	url, js := natsJetStream(t)
	srv := devserver.ForTest(t, devserver.Options{})
	e := &env{t: t, natsURL: url, js: js, cfg: testConfig()}
	e.deleteStreamsAtEnd()
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	c := srv.Client()
	rc := &rewardsclient.Client{Temporal: c, Logger: quietLogger(t)}
	f := newFleet(t, e, srv.FrontendHostPort(), testLoad...)
	unenrollGone(t, ctx, c, rc)

	procs := []*ingressProc{f.start("a"), f.start("b"), f.start("c")}
	acked := watchAcks(t, url, e.cfg.PointsStream)
	w := newWorkload(t, e.cfg.PointsPrefix, fullPerCustomer)
	published := time.Now()
	w.publishAll(t, e, 0)
	total := w.total()
	t.Logf("published %d messages (%d events of %d customers, %d poison) in %v", total,
		mixCustomers*fullPerCustomer+soloEvents, len(w.customers), len(w.poison), time.Since(published).Round(time.Millisecond))

	waitFor(t, "a third of the messages handled, each process holding partitions", 5*time.Minute, func() (bool, error) {
		for _, p := range procs {
			if p.partitionsHeld() < 1 {
				return false, nil
			}
		}
		return f.handled() >= float64(total/3), nil
	})
	victim := procs[1]
	pins := map[string]string{}
	for _, cons := range e.partitionConsumers(ctx) {
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.PriorityGroups) == 1 {
			pins[info.Name] = info.PriorityGroups[0].PinnedClientID
		}
	}
	held := victim.partitionsHeld()
	handledAtKill := f.handled()
	sinceStart := time.Since(published)
	victim.Signal(syscall.SIGKILL)
	killedAt := time.Now()
	pendingAtKill, unackedAtKill := e.backlog(ctx)
	t.Logf("SIGKILL of one of 3 processes, holding %v of 8 partitions, after %v messages handled (%.0f/s); %d not yet delivered, %d delivered and unacked",
		held, handledAtKill, handledAtKill/sinceStart.Seconds(), pendingAtKill, unackedAtKill)

	// The killed process's partitions are those whose pin changes; each is
	// handed over at its first ack after the kill.
	handover := map[string]time.Duration{}
	waitFor(t, "the killed process's partitions acking again", 2*time.Minute, func() (bool, error) {
		for _, cons := range e.partitionConsumers(ctx) {
			info, err := cons.Info(ctx)
			if err != nil {
				return false, err
			}
			if _, done := handover[info.Name]; done || len(info.PriorityGroups) != 1 {
				continue
			}
			pin := info.PriorityGroups[0].PinnedClientID
			if pin == pins[info.Name] || pin == "" {
				continue
			}
			if at := acked.lastAck(info.Name); at.After(killedAt) {
				handover[info.Name] = at.Sub(killedAt)
			}
		}
		return float64(len(handover)) >= held, nil
	})
	var lo, hi time.Duration
	for _, d := range handover {
		if lo == 0 || d < lo {
			lo = d
		}
		hi = max(hi, d)
	}
	t.Logf("hand-over: the %d partitions of the killed process acked again %v to %v after the kill (pin TTL %v, ack wait %v): %v",
		len(handover), lo.Round(time.Millisecond), hi.Round(time.Millisecond), e.cfg.PinnedTTL, ackWait, handover)

	waitFor(t, "the backlog drained", 6*time.Minute, func() (bool, error) {
		pending, unacked := e.backlog(ctx)
		return pending == 0 && unacked == 0, nil
	})
	drained := time.Since(killedAt)
	t.Logf("the backlog of %d drained %v after the kill by the two processes left (%.0f messages/s)",
		pendingAtKill+uint64(unackedAtKill), drained.Round(time.Millisecond), float64(pendingAtKill+uint64(unackedAtKill))/drained.Seconds())
	for _, p := range []*ingressProc{procs[0], procs[2]} {
		if m := scrape(p.addr); !has(m, "ingest_partition_changes_total") || !has(m, "temporal_request") {
			t.Errorf("%s's /metrics lacks the ingress's or the SDK's series", p.name)
		}
	}
	w.check(t, ctx, e, c, rc)
	for _, p := range []*ingressProc{procs[0], procs[2]} {
		p.Signal(syscall.SIGTERM)
	}
}
