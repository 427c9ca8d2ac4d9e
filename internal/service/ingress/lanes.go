package ingress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// pinGroup is the priority group of the points consumers: JetStream pins
// each consumer to one pulling client of the group at a time.
const pinGroup = "ingest"

// pinHeader is the header JetStream puts on every message a pinned
// consumer delivers: the ID of the pin it was delivered under.
const pinHeader = "Nats-Pin-Id"

// lane is one durable consumer of point events with a pinned-client
// priority group: a partition, or (index -1) the consumer of the messages
// a stream holds from before it was partitioned. The process holding its
// pin is the only one it delivers to.
type lane struct {
	r       *points
	index   int
	durable string
	filter  string
	cons    jetstream.Consumer
	// inbox holds the messages received and not yet looked at (pump), so
	// that the consumer's callback never waits on a gain's reads: a process
	// that stops pulling for the pin TTL loses the pin. unread counts them.
	inbox  chan jetstream.Msg
	unread sync.WaitGroup

	mu sync.Mutex
	cc jetstream.ConsumeContext
	// lease is the pin this process holds, nil if none.
	lease *lease
	// gainedAt is when lease was gained: a consumer info asked for
	// earlier says nothing about it.
	gainedAt time.Time
	// lastLost is the pin last lost: messages still arriving under it were
	// delivered before, and are handed back.
	lastLost string
	// releasing: the lane is being given up (or the ingress stops); what
	// arrives is handed back.
	releasing bool
	// unpinnedSince is when the consumer was last seen without a pin but
	// with messages, zero while it has a pin or none.
	unpinnedSince time.Time
}

// points runs the partitions of the points stream in this process: it
// pulls from the lanes it holds or may take (balance), gains and loses
// pins, and gives partitions up for other processes.
type points struct {
	in      *Ingress
	cfg     Config
	d       *dispatcher
	src     *binding
	stream  jetstream.Stream
	parts   []*lane
	legacy  *lane
	members *members
	pull    int
	// ctx bounds the JetStream requests of the lanes; it ends when the
	// ingress has stopped.
	ctx      context.Context
	releases sync.WaitGroup
}

// pinnedConfig is the configuration of a lane's consumer.
func pinnedConfig(cfg Config, durable, filter, what string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:        durable,
		Description:    "entityflow ingest: " + what,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        cfg.AckWait,
		MaxAckPending:  cfg.MaxAckPending,
		MaxDeliver:     -1,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		FilterSubject:  filter,
		PriorityPolicy: jetstream.PriorityPolicyPinned,
		PriorityGroups: []string{pinGroup},
		PinnedTTL:      cfg.PinnedTTL,
	}
}

// checkPinned refuses a consumer that came back without the pinned
// priority policy: a server too old for it ignores the setting.
func checkPinned(cons jetstream.Consumer, stream string) error {
	c := cons.CachedInfo().Config
	if c.PriorityPolicy != jetstream.PriorityPolicyPinned {
		return fmt.Errorf("ingress: consumer %s on stream %s has no pinned-client priority group: the NATS server ignored it (the ingress needs nats-server %s or later)",
			c.Durable, stream, MinServerVersion)
	}
	return nil
}

// startPoints creates or updates the lanes' consumers, and the bucket of the
// processes sharing them. migrated says the stream was partitioned just now:
// its older messages, if it holds any and no consumer had them, get a
// consumer of their own, drained before the partitions.
// runCtx bounds the lanes' JetStream requests once they run.
func (in *Ingress) startPoints(ctx, runCtx context.Context, cfg Config, d *dispatcher, src *binding, migrated bool) (*points, error) {
	stream, err := in.JS.Stream(ctx, src.stream)
	if err != nil {
		return nil, fmt.Errorf("ingress: stream %s: %w", src.stream, err)
	}
	r := &points{in: in, cfg: cfg, d: d, src: src, stream: stream, ctx: runCtx,
		pull: min(cfg.MaxAckPending, max(2*cfg.Workers, 64))}
	for p := range cfg.Partitions {
		l := r.newLane(p, partitionDurable(cfg.PointsDurable, p), partitionFilter(cfg.PointsPrefix, p))
		l.cons, err = stream.CreateOrUpdateConsumer(ctx, pinnedConfig(cfg, l.durable, l.filter, fmt.Sprintf("points, partition %d of %d", p, cfg.Partitions)))
		if err != nil {
			return nil, fmt.Errorf("ingress: consumer %s on stream %s: %w", l.durable, src.stream, err)
		}
		if err := checkPinned(l.cons, src.stream); err != nil {
			return nil, err
		}
		r.parts = append(r.parts, l)
	}
	if r.legacy, err = in.legacyLane(ctx, cfg, r, migrated); err != nil {
		return nil, err
	}
	if r.members, err = joinMembers(ctx, in.JS, membersBucket(cfg), cfg.PinnedTTL); err != nil {
		return nil, err
	}
	in.Logger = in.Logger.With("process", r.members.key)
	return r, nil
}

// legacyLane returns the lane of the messages the stream holds from before
// it was partitioned, stored under their published subjects, nil if there
// are none to consume: the durable PointsDurable of an earlier ingress
// (made pinned, so that one process at a time drains it), or, if the
// stream was partitioned just now and holds such messages that no consumer
// had, a new one.
func (in *Ingress) legacyLane(ctx context.Context, cfg Config, r *points, migrated bool) (*lane, error) {
	l := r.newLane(-1, cfg.PointsDurable, cfg.PointsPrefix+".>")
	cons, err := r.stream.Consumer(ctx, cfg.PointsDurable)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		if !migrated {
			return nil, nil
		}
		if _, err := r.stream.GetLastMsgForSubject(ctx, l.filter); errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, nil
		} else if err != nil {
			return nil, fmt.Errorf("ingress: looking for messages of stream %s stored before it was partitioned: %w", r.stream.CachedInfo().Config.Name, err)
		}
		l.cons, err = r.stream.CreateOrUpdateConsumer(ctx, pinnedConfig(cfg, l.durable, l.filter, "points stored before the stream was partitioned"))
	case err != nil:
		return nil, fmt.Errorf("ingress: consumer %s on stream %s: %w", cfg.PointsDurable, in.Config.PointsStream, err)
	default:
		c := cons.CachedInfo().Config
		l.filter = c.FilterSubject
		up := pinnedConfig(cfg, l.durable, l.filter, "points stored before the stream was partitioned")
		up.DeliverPolicy, up.OptStartSeq, up.OptStartTime = c.DeliverPolicy, c.OptStartSeq, c.OptStartTime
		up.FilterSubjects, up.ReplayPolicy, up.MaxWaiting = c.FilterSubjects, c.ReplayPolicy, c.MaxWaiting
		l.cons, err = r.stream.UpdateConsumer(ctx, up)
	}
	if err != nil {
		return nil, fmt.Errorf("ingress: consumer %s on stream %s: %w", cfg.PointsDurable, cfg.PointsStream, err)
	}
	if err := checkPinned(l.cons, cfg.PointsStream); err != nil {
		return nil, err
	}
	in.Logger.Info("ingress: the points stream holds messages from before it was partitioned; one process at a time drains them, then the partitions start",
		"consumer", l.durable, "filter", l.filter)
	return l, nil
}

// newLane returns a lane whose inbox is read until the ingress has stopped.
func (r *points) newLane(index int, durable, filter string) *lane {
	// JetStream delivers at most MaxAckPending of the consumer unacked.
	l := &lane{r: r, index: index, durable: durable, filter: filter, inbox: make(chan jetstream.Msg, r.cfg.MaxAckPending+r.pull)}
	go l.pump()
	return l
}

// tick is how often the lanes are looked at: their pins, the processes
// sharing them, the balance.
func (r *points) tick() time.Duration { return min(time.Second, r.cfg.PinnedTTL/4) }

// run balances the lanes every tick until ctx ends.
func (r *points) run(ctx context.Context) {
	t := time.NewTicker(r.tick())
	defer t.Stop()
	lastBeat := time.Now()
	for {
		if time.Since(lastBeat) >= r.cfg.PinnedTTL/3 {
			if err := r.members.beat(ctx); err == nil {
				lastBeat = time.Now()
			} else if ctx.Err() == nil {
				r.in.Logger.Warn("ingress: announcing this process", "error", err)
			}
		}
		if !r.drainLegacy(ctx) {
			r.balance(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// drainLegacy pulls from the lane of the messages stored before the stream
// was partitioned while it has any, and deletes its consumer once they are
// all acked. It reports whether they are still being drained (the
// partitions wait, so that each customer's older messages come first).
func (r *points) drainLegacy(ctx context.Context) bool {
	l := r.legacy
	if l == nil {
		return false
	}
	info, err := l.info(ctx)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
	case err != nil:
		return true
	case info.NumPending == 0 && info.NumAckPending == 0:
		if err := r.stream.DeleteConsumer(ctx, l.durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			r.in.Logger.Warn("ingress: deleting the drained consumer of the messages stored before partitioning", "consumer", l.durable, "error", err)
			return true
		}
		r.in.Logger.Info("ingress: the messages stored before the stream was partitioned are drained; the partitions start", "consumer", l.durable)
	default:
		r.in.Metrics.pending.WithLabelValues(SourcePoints).Set(float64(info.NumPending))
		r.in.Metrics.ackPending.WithLabelValues(SourcePoints).Set(float64(info.NumAckPending))
		if err := l.startPulling(); err != nil {
			r.in.Logger.Warn("ingress: pulling", "consumer", l.durable, "error", err)
		}
		return true
	}
	l.stopPulling(true)
	if ls := l.current(); ls != nil {
		l.lose(ls, "released")
	}
	r.legacy = nil
	return false
}

// balance reads every partition's consumer (lag, pin), notices pins lost,
// and pulls from and gives up partitions as balance says.
func (r *points) balance(ctx context.Context) {
	n, err := r.members.count(ctx)
	if err != nil {
		if ctx.Err() == nil {
			r.in.Logger.Warn("ingress: counting the processes", "error", err)
		}
		return
	}
	views := make([]laneView, len(r.parts))
	var pending, ackPending float64
	held := 0
	var pins []string
	for i, l := range r.parts {
		orphan := false
		if info, err := l.info(ctx); err == nil {
			pending += float64(info.NumPending)
			ackPending += float64(info.NumAckPending)
			r.in.Metrics.partitionPending.WithLabelValues(strconv.Itoa(l.index)).Set(float64(info.NumPending))
			r.in.Metrics.partitionAckPending.WithLabelValues(strconv.Itoa(l.index)).Set(float64(info.NumAckPending))
			pins = append(pins, pinnedID(info))
			orphan = l.orphaned(pinnedID(info) == "" && info.NumPending+uint64(info.NumAckPending) > 0)
		}
		views[i] = laneView{held: l.current() != nil, load: r.d.holding(l.durable), orphan: orphan}
		if views[i].held {
			held++
		}
	}
	r.in.Metrics.pending.WithLabelValues(SourcePoints).Set(pending)
	r.in.Metrics.ackPending.WithLabelValues(SourcePoints).Set(ackPending)
	r.in.Metrics.partitions.Set(float64(held))
	pull, release := balance(views, n)
	if r.in.Logger.Enabled(ctx, slog.LevelDebug) {
		r.in.Logger.Debug("ingress: balance", "processes", n, "held", held, "share", fairShare(len(r.parts), n), "pull", pull, "pins", pins)
	}
	for i, l := range r.parts {
		var err error
		switch {
		case l.isReleasing():
		case pull[i]:
			err = l.startPulling()
		default:
			l.stopPulling(false)
		}
		if err != nil && ctx.Err() == nil {
			r.in.Logger.Warn("ingress: pulling", "consumer", l.durable, "error", err)
		}
	}
	if release >= 0 {
		l := r.parts[release]
		if ls := l.beginRelease(); ls != nil {
			r.in.Logger.Info("ingress: giving a partition up for another process", "partition", l.index,
				"processes", n, "held", held, "share", fairShare(len(r.parts), n))
			r.releases.Go(func() { r.release(l, ls) })
		}
	}
}

// release gives up l, held under ls, to another process: it stops pulling
// from it, hands back what is queued and what arrives meanwhile, no longer
// keeps what is in flight alive, and unpins the consumer, so that JetStream
// pins it to another process pulling from it at once. What is in flight
// finishes here; the next holder's customers wait for it (inheritance).
func (r *points) release(l *lane, ls *lease) {
	defer l.endRelease()
	l.stopPulling(true)
	l.unread.Wait()
	l.lose(ls, "released")
	r.unpin(l, ls)
}

// unpin tells JetStream that this process no longer holds l's pin, if the
// pin is still ls's (another process's pin is left alone).
func (r *points) unpin(l *lane, ls *lease) {
	ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
	defer cancel()
	info, err := l.cons.Info(ctx)
	if err == nil {
		if pinnedID(info) != ls.pin {
			return
		}
		err = r.stream.UnpinConsumer(ctx, l.durable, pinGroup)
	}
	if err != nil {
		r.in.Logger.Warn("ingress: unpinning; the partition passes on after the pin TTL", "consumer", l.durable, "error", err)
	}
}

// stop, before the dispatcher stops, stops every lane taking messages,
// hands back what is queued and gives up the pins this process holds, so
// that other processes take the partitions at once rather than after the
// pin TTL; what is in flight finishes meanwhile (the dispatcher's stop).
func (r *points) stop() {
	// Leaving first, the others count their shares without this process.
	ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
	defer cancel()
	r.members.leave(ctx)
	var wg sync.WaitGroup
	for _, l := range r.lanes() {
		l.mu.Lock()
		l.releasing = true
		l.mu.Unlock()
		wg.Go(func() {
			l.stopPulling(true)
			l.unread.Wait()
			if ls := l.current(); ls != nil {
				l.lose(ls, "released")
				r.unpin(l, ls)
			}
		})
	}
	wg.Wait()
}

// wait, once the dispatcher has stopped, waits for releases under way.
func (r *points) wait() {
	r.releases.Wait()
}

// lanes returns the partitions and, while there is one, the legacy lane.
func (r *points) lanes() []*lane {
	if r.legacy != nil {
		return append([]*lane{r.legacy}, r.parts...)
	}
	return r.parts
}

// startPulling consumes l if it does not yet.
func (l *lane) startPulling() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cc != nil || l.releasing {
		return nil
	}
	r := l.r
	cc, err := l.cons.Consume(l.enqueue,
		jetstream.PullPriorityGroup(pinGroup),
		jetstream.PullMaxMessages(r.pull),
		// A live holder pulls again well within the pin TTL.
		jetstream.PullExpiry(r.cfg.PinnedTTL/2),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) { l.consumeError(err) }))
	if err != nil {
		return fmt.Errorf("consuming %s: %w", l.durable, err)
	}
	l.cc = cc
	return nil
}

// stopPulling stops consuming l: the messages already received reach
// receive, which hands them back if l is being given up. Unless force, a
// lane this process holds goes on.
func (l *lane) stopPulling(force bool) {
	l.mu.Lock()
	cc := l.cc
	if cc == nil || (!force && l.lease != nil) {
		l.mu.Unlock()
		return
	}
	l.cc = nil
	l.mu.Unlock()
	cc.Drain()
	select {
	case <-cc.Closed():
	case <-time.After(5 * time.Second):
		cc.Stop()
	}
}

// current returns the pin l holds, nil if none.
func (l *lane) current() *lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lease
}

func (l *lane) isReleasing() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.releasing
}

// beginRelease marks l as being given up and returns its lease; nil if it
// holds none or is given up already.
func (l *lane) beginRelease() *lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lease == nil || l.releasing {
		return nil
	}
	l.releasing = true
	return l.lease
}

func (l *lane) endRelease() {
	l.mu.Lock()
	l.releasing = false
	l.mu.Unlock()
}

// enqueue is the lane's consumer callback: it puts the message in the
// inbox, for pump.
func (l *lane) enqueue(m jetstream.Msg) {
	l.unread.Add(1)
	l.inbox <- m
}

// pump looks at the inbox's messages in the order they came (receive)
// until the ingress has stopped.
func (l *lane) pump() {
	for {
		select {
		case <-l.r.ctx.Done():
			return
		case m := <-l.inbox:
			l.receive(m)
			l.unread.Done()
		}
	}
}

// receive looks at one message of the lane. A message under a pin this
// process did not hold yet gains the lane (gain); under a pin it lost, or
// while the lane is given up, it is handed back.
func (l *lane) receive(m jetstream.Msg) {
	pin := m.Headers().Get(pinHeader)
	l.mu.Lock()
	ls, releasing, stale := l.lease, l.releasing, pin == "" || pin == l.lastLost
	l.mu.Unlock()
	if releasing || stale {
		l.handBack(m)
		return
	}
	if ls == nil || ls.pin != pin {
		if ls != nil {
			l.lose(ls, "lost")
		}
		if ls = l.gain(pin); ls == nil {
			l.handBack(m)
			return
		}
	}
	l.r.in.deliver(l.r.d, m, ls)
}

// handBack nacks a message for whoever holds the lane next.
func (l *lane) handBack(m jetstream.Msg) {
	if err := m.Nak(); err != nil {
		l.r.in.Logger.Debug("ingress: nak failed; the message comes again after the ack wait", "subject", m.Subject(), "error", err)
	}
	l.r.in.Metrics.retried.WithLabelValues(SourcePoints, "handover").Inc()
}

// gain makes pin this process's lease on l: before its first message is
// handled, it reads which messages an earlier holder may have left unacked
// (inheritUnacked), so that none is overtaken. Nil if that could not be
// read (the message is handed back, and the next one tries again).
func (l *lane) gain(pin string) *lease {
	r := l.r
	began := time.Now()
	ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer cancel()
	unacked, customers, err := r.inheritUnacked(ctx, l)
	if err != nil {
		r.in.Logger.Warn("ingress: reading what the partition's previous holder left unacked; retrying", "consumer", l.durable, "error", err)
		return nil
	}
	ls := &lease{pin: pin}
	l.mu.Lock()
	l.lease, l.gainedAt = ls, began
	l.mu.Unlock()
	r.in.Metrics.partitionChanges.WithLabelValues("gained").Inc()
	r.in.Logger.Info("ingress: holding a partition; the customers of messages its previous holder may have left unacked wait for them, up to an ack wait",
		"consumer", l.durable, "partition", l.index, "unacked", unacked, "customers_waiting", customers, "took", time.Since(began).Round(time.Millisecond))
	return ls
}

// lose ends ls, l's lease: the lane's queued and parked messages are handed
// back, those in flight are no longer kept alive (they come back to the
// next holder within an ack wait unless they are acked first).
func (l *lane) lose(ls *lease, why string) {
	l.mu.Lock()
	if l.lease != ls {
		l.mu.Unlock()
		return
	}
	l.lease, l.lastLost = nil, ls.pin
	l.mu.Unlock()
	ls.lost.Store(true)
	l.r.d.handBack(l.durable)
	l.r.in.Metrics.partitionChanges.WithLabelValues(why).Inc()
	if why == "lost" {
		l.r.in.Logger.Warn("ingress: a partition's pin passed to another process; handing back what this one held", "consumer", l.durable, "partition", l.index)
	} else {
		l.r.in.Logger.Info("ingress: gave a partition up", "consumer", l.durable, "partition", l.index)
	}
}

// orphaned notes whether the consumer is without a pin and has messages,
// and reports whether it has been so for longer than a hand-over takes (the
// pin TTL and an ack wait).
func (l *lane) orphaned(unpinned bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case !unpinned:
		l.unpinnedSince = time.Time{}
	case l.unpinnedSince.IsZero():
		l.unpinnedSince = time.Now()
	}
	return unpinned && time.Since(l.unpinnedSince) > l.r.cfg.PinnedTTL+l.r.cfg.AckWait
}

// pinnedID returns the pin of the consumer's priority group, "" if none.
func pinnedID(info *jetstream.ConsumerInfo) string {
	for _, g := range info.PriorityGroups {
		if g.Group == pinGroup {
			return g.PinnedClientID
		}
	}
	return ""
}

// info reads l's consumer, loses l's lease if another pin holds it now
// (checkPin), and ends the lane's inheritance if no earlier holder has a
// message left (dispatcher.settled).
func (l *lane) info(ctx context.Context) (*jetstream.ConsumerInfo, error) {
	d := l.r.d
	inheriting := d.inheriting(l.durable)
	var before map[uint64]bool
	if inheriting {
		before = d.ownUnacked(l.durable)
	}
	asked := time.Now()
	info, err := l.cons.Info(ctx)
	if err != nil {
		return nil, err
	}
	l.checkPin(info, asked)
	if inheriting {
		d.settled(l.durable, info.NumAckPending, before, d.ownUnacked(l.durable))
	}
	return info, nil
}

// checkPin loses l's lease when the consumer's info, asked for at asked,
// names another pin: it expired (this process did not pull for the pin TTL)
// or was given to another process.
func (l *lane) checkPin(info *jetstream.ConsumerInfo, asked time.Time) {
	pinned := pinnedID(info)
	l.mu.Lock()
	ls := l.lease
	fresh := !asked.Before(l.gainedAt)
	releasing := l.releasing
	l.mu.Unlock()
	if ls != nil && fresh && !releasing && pinned != ls.pin {
		l.lose(ls, "lost")
	}
}

// consumeError handles an error of l's consumer: a pin ID mismatch means
// JetStream gave the pin to another process.
func (l *lane) consumeError(err error) {
	if errors.Is(err, jetstream.ErrPinIDMismatch) {
		l.r.in.Logger.Debug("ingress: consuming", "consumer", l.durable, "error", err)
		l.mu.Lock()
		ls, releasing := l.lease, l.releasing
		l.mu.Unlock()
		if ls != nil && !releasing {
			l.lose(ls, "lost")
		}
		return
	}
	if errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoHeartbeat) {
		l.r.in.Logger.Debug("ingress: consuming", "consumer", l.durable, "error", err)
		return
	}
	l.r.in.Logger.Warn("ingress: consuming", "consumer", l.durable, "error", err)
}
