package ingest_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/entityflow/entityflow/internal/service/ingress"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// outageDuration is the Temporal outage of TestIngressTemporalOutage:
// $INGEST_TEST_OUTAGE, else 30 s.
func outageDuration(t *testing.T) time.Duration {
	v := os.Getenv("INGEST_TEST_OUTAGE")
	if v == "" {
		return 30 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("INGEST_TEST_OUTAGE=%q: want a duration such as 30s", v)
	}
	return d
}

// A Temporal outage (the ingress's connections to the dev server cut for
// INGEST_TEST_OUTAGE, 30 s by default) while 50 point events of one customer
// wait behind a first one that fails: the 50 are deferred again and again
// (delivered many times) before their turn. Then a second, short outage
// begins as the first update carrying one of those is sent, so it fails
// at its first attempt, and it lasts until such a message has failed. Every message is applied exactly once, in order, none is
// dead-lettered, and every message's first failure backs off 1 s (the base),
// whatever JetStream's delivery count: the dispatcher's log says so.
func TestIngressTemporalOutage(t *testing.T) {
	e := newEnv(t)
	outage := outageDuration(t)
	const (
		queued        = 50
		attemptTime   = 2 * time.Second
		secondOutage  = 5 * time.Second // longer than an attempt, so the one it meets fails
		lastsAtMost   = 30 * time.Second
		customer      = "outage-1"
		firstBackoff  = time.Second
		maxDeliveries = 20
	)
	proxy := startProxy(t, e.frontend)
	tc, err := client.Dial(client.Options{HostPort: proxy.addr(), Logger: sdklog.NewStructuredLogger(quietLogger(t))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	var once sync.Once
	retries := &retryLog{}
	// The second outage lasts at least secondOutage and, for at most
	// lastsAtMost, until a message delivered before its turn has failed
	// its first attempt: the messages queued behind the first go on in
	// batches, and those the first batch carries may all be at their first
	// delivery (held by the process, never nacked).
	cutAgain := func() {
		once.Do(func() {
			proxy.setDown(true)
			go func() {
				defer proxy.setDown(false)
				time.Sleep(secondOutage)
				for end := time.Now().Add(lastsAtMost); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
					if slices.ContainsFunc(retries.firstFailures(), func(f retryLine) bool { return f.deliveries > 1 }) {
						return
					}
				}
			}()
		})
	}
	// The second outage begins as the first update that carries a
	// deferred message is sent, once the first outage is over: the
	// ingress holds at most MaxPerCustomer messages behind the one it
	// tries, at their first delivery, so every message after those was
	// nacked (deferred) before its turn, and fails its first attempt in
	// that update.
	held := e.cfg.MaxPerCustomer
	cutter := &cutBeforeUpdate{Client: tc, cut: cutAgain, carries: func(key string) bool {
		var i int
		_, err := fmt.Sscanf(key, "o-%d", &i)
		return err == nil && i > held
	}}
	e.rewards = &rewardsclient.Client{Temporal: cutter, Attempts: 1, AttemptTimeout: attemptTime, Logger: quietLogger(t)}
	e.cfg.Retry = ingress.RetryPolicy{Base: firstBackoff, Max: 8 * time.Second, MaxDeliveries: maxDeliveries}
	e.logger = slog.New(retries)
	reg := prometheus.NewRegistry()
	e.start(reg)

	// Purchases and redemptions of the balance by turns: a redemption that
	// overtook its purchase would be refused (an overdraft, dead-lettered).
	subject := ingress.PointsSubject(e.cfg.PointsPrefix, "default", customer)
	var keys []string
	var lifetime int64
	proxy.setDown(true)
	began := time.Now()
	for i := range queued + 1 {
		ev := rewards.PointEvent{DedupKey: fmt.Sprintf("o-%02d", i), Activity: "purchase", Points: int64(i + 1)}
		if i%2 == 1 {
			ev.Activity, ev.Points = "redeem", -int64(i)
		} else {
			lifetime += ev.Points
		}
		keys = append(keys, ev.DedupKey)
		e.publish(subject, mustJSON(t, ev), ev.DedupKey)
	}
	time.Sleep(time.Until(began.Add(outage)))
	proxy.setDown(false)
	cutter.armed.Store(true)
	t.Logf("Temporal unreachable for the ingress for %v", time.Since(began).Round(time.Millisecond))

	handled := func() float64 {
		return counter(t, reg, "ingest_handled_total", map[string]string{"source": ingress.SourcePoints})
	}
	waitFor(t, "every message handled", 3*time.Minute, func() (bool, error) { return handled() >= queued+1, nil })
	time.Sleep(time.Second) // anything more would come now
	t.Logf("all handled %v after the outage began", time.Since(began).Round(time.Millisecond))

	// Exactly once: one ack each, and the entity counted each event once.
	applied := counter(t, reg, "ingest_handled_total", map[string]string{"outcome": ingress.OutcomeApplied})
	dup := counter(t, reg, "ingest_handled_total", map[string]string{"outcome": ingress.OutcomeDuplicate})
	if applied+dup != queued+1 || handled() != queued+1 {
		t.Errorf("acked %v applied and %v duplicate of %v handled, want %d in all", applied, dup, handled(), queued+1)
	}
	// The entity is read past the proxy: the second outage may outlast
	// the last message.
	ctx := background(t)
	direct := &rewardsclient.Client{Temporal: e.c, Attempts: 5, MaxBackoff: time.Second, AttemptTimeout: 10 * time.Second, Logger: quietLogger(t)}
	st, err := direct.Status(ctx, customer)
	if err != nil {
		t.Fatal(err)
	}
	if st.EventCount != queued+1 || st.LifetimePoints != lifetime || st.Points != queued+1 {
		t.Errorf("entity: %d events, %d lifetime points, %d points; want %d, %d, %d", st.EventCount, st.LifetimePoints, st.Points, queued+1, lifetime, queued+1)
	}
	if got := appliedOrder(t, e.c, rewards.RewardsWorkflowID(customer)); !slices.Equal(got, keys) {
		t.Errorf("applied in the order %v, want %v", got, keys)
	}
	if dl := e.deadLetters(); len(dl) != 0 {
		t.Errorf("%d dead letters, want none; the first: %v", len(dl), dl[0].Headers())
	}

	// Every message's first failure backed off the base, also those
	// delivered many times before their turn.
	firsts := retries.firstFailures()
	deferredFirst := 0
	for _, f := range firsts {
		t.Logf("stream sequence %d: first failure at delivery %d (attempt %d): retry in %v", f.seq, f.deliveries, f.attempts, f.retryIn)
		if f.retryIn != firstBackoff {
			t.Errorf("stream sequence %d, delivered %d times, backed off %v after its first failure, want %v", f.seq, f.deliveries, f.retryIn, firstBackoff)
		}
		if f.deliveries > 1 {
			deferredFirst++
		}
	}
	if len(firsts) < 2 || deferredFirst == 0 {
		t.Errorf("%d messages failed, %d of them first after deliveries before their turn: the outages did not meet a deferred message", len(firsts), deferredFirst)
	}
	t.Logf("retried: %v deferred, %v transient; consumed %v deliveries",
		counter(t, reg, "ingest_retried_total", map[string]string{"reason": "deferred"}),
		counter(t, reg, "ingest_retried_total", map[string]string{"reason": "transient"}),
		counter(t, reg, "ingest_consumed_total", nil))
}

// appliedOrder returns the dedup keys of the point events of the
// apply-points and apply-points-batch updates the entity's current run
// accepted, each once, in the order it accepted them.
func appliedOrder(t *testing.T, c client.Client, workflowID string) []string {
	t.Helper()
	var keys []string
	seen := map[string]bool{}
	it := c.GetWorkflowHistory(background(t), workflowID, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		events, _ := acceptedEvents(t, ev.GetWorkflowExecutionUpdateAcceptedEventAttributes())
		for _, pe := range events {
			if !seen[pe.DedupKey] {
				seen[pe.DedupKey] = true
				keys = append(keys, pe.DedupKey)
			}
		}
	}
	return keys
}

// cutBeforeUpdate is the Temporal client of the ingress, which calls cut,
// once armed, before it sends an update carrying a point event whose dedup
// key carries reports true: the test's trigger for a second outage at a
// known point of the stream. It changes no answer.
type cutBeforeUpdate struct {
	client.Client
	armed   atomic.Bool
	carries func(key string) bool
	cut     func()
}

func (c *cutBeforeUpdate) UpdateWithStartWorkflow(ctx context.Context, opts client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	if c.armed.Load() && slices.ContainsFunc(pointEvents(opts.UpdateOptions.Args), func(ev rewards.PointEvent) bool { return c.carries(ev.DedupKey) }) {
		c.cut()
	}
	return c.Client.UpdateWithStartWorkflow(ctx, opts)
}

// pointEvents returns the point events of an apply-points or
// apply-points-batch update's arguments.
func pointEvents(args []any) []rewards.PointEvent {
	var out []rewards.PointEvent
	for _, a := range args {
		switch v := a.(type) {
		case rewards.PointEvent:
			out = append(out, v)
		case rewards.PointEventBatch:
			out = append(out, v.Events...)
		}
	}
	return out
}

// proxy forwards TCP connections to a target; while down it cuts the
// connections it holds and closes new ones at once: an outage of the target
// for whoever connects through it.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]struct{}
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.setDown(true)
	})
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			_ = dst.Close()
			_ = src.Close()
			p.mu.Lock()
			delete(p.conns, dst)
			delete(p.conns, src)
			p.mu.Unlock()
		}
		go pipe(c, up)
		go pipe(up, c)
	}
}

// setDown starts (cutting every connection) or ends an outage.
func (p *proxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			_ = c.Close()
		}
		clear(p.conns)
	}
}

// retryLog is a slog handler that keeps the dispatcher's retry lines.
type retryLog struct {
	mu    sync.Mutex
	lines []retryLine
}

// retryLine is one nak after a failed attempt.
type retryLine struct {
	seq, deliveries, attempts uint64
	retryIn                   time.Duration
}

// firstFailures returns each message's first retry line, in the order of
// its first failure.
func (l *retryLog) firstFailures() []retryLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []retryLine
	seen := map[uint64]bool{}
	for _, r := range l.lines {
		if !seen[r.seq] {
			seen[r.seq] = true
			out = append(out, r)
		}
	}
	return out
}

func (l *retryLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *retryLog) Handle(_ context.Context, r slog.Record) error {
	return retryHandler{log: l}.Handle(context.Background(), r)
}
func (l *retryLog) WithAttrs(attrs []slog.Attr) slog.Handler {
	return retryHandler{log: l, attrs: attrs}
}
func (l *retryLog) WithGroup(string) slog.Handler { return l }

// retryHandler is retryLog with the attributes of a Logger.With.
type retryHandler struct {
	log   *retryLog
	attrs []slog.Attr
}

func (h retryHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h retryHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return retryHandler{log: h.log, attrs: append(slices.Clip(h.attrs), attrs...)}
}
func (h retryHandler) WithGroup(string) slog.Handler { return h }
func (h retryHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "ingress: retrying" && r.Message != "ingress: unexplained failure; retrying" {
		return nil
	}
	var line retryLine
	set := func(a slog.Attr) bool {
		switch a.Key {
		case "stream_seq":
			line.seq = a.Value.Uint64()
		case "deliveries":
			line.deliveries = a.Value.Uint64()
		case "attempts":
			line.attempts = a.Value.Uint64()
		case "retry_in":
			line.retryIn = a.Value.Duration()
		}
		return true
	}
	for _, a := range h.attrs {
		set(a)
	}
	r.Attrs(set)
	h.log.mu.Lock()
	h.log.lines = append(h.log.lines, line)
	h.log.mu.Unlock()
	return nil
}
