package deadletters

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/entityflow/entityflow/internal/service/ingress"
)

// Outcome is what became of a replayed letter.
type Outcome string

const (
	// Applied: the ingress acked the republished message and dead-lettered
	// it not again. An event the entity already had (its dedup window
	// answered it as a duplicate) is acked the same way and cannot be told
	// apart on the bus: it is reported applied, and counted once.
	Applied Outcome = "applied"
	// Duplicate: the replay stream's PubAck said Duplicate (the same letter
	// was replayed within its duplicate window, by an earlier replay: a
	// replay's Nats-Msg-Id is its letter's own), and that earlier copy was
	// acked and not dead-lettered.
	Duplicate Outcome = "duplicate"
	// StillFailing: the republished message (or the copy JetStream kept in
	// its place) was dead-lettered again.
	StillFailing Outcome = "still-failing"
	// Pending: neither within the wait (the ingress not running, or a
	// message before it on its consumer not acked yet).
	Pending Outcome = "pending"
	// DryRun: not sent (-dry-run).
	DryRun Outcome = "dry-run"
)

// ReplayOptions says how Replay goes.
type ReplayOptions struct {
	// DryRun sends nothing and reports every letter DryRun.
	DryRun bool
	// Wait bounds how long Replay watches for the outcomes (default 30 s).
	Wait time.Duration
	// Poll is how often it looks (default 250 ms).
	Poll time.Duration
	// Purge deletes from the dead-letter stream each letter whose replay
	// was applied or a duplicate; without it no letter is ever deleted.
	Purge bool
}

// Result is one letter's replay.
type Result struct {
	Letter  Letter  `json:"letter"`
	Outcome Outcome `json:"outcome"`
	// MsgID is the Nats-Msg-Id it was sent with (ingress.ReplayMsgID) and
	// ReplaySequence where the replay stream stored it (for a duplicate, the
	// copy JetStream kept); Stream and Sequence where the stream the ingress
	// consumes stored its copy (sourced from the replay stream), once seen.
	MsgID          string `json:"msg_id"`
	ReplaySequence uint64 `json:"replay_sequence,omitempty"`
	Stream         string `json:"stream,omitempty"`
	Sequence       uint64 `json:"stream_sequence,omitempty"`
	// DeadLetter is the sequence of its new dead letter (StillFailing), and
	// Error that letter's error.
	DeadLetter uint64 `json:"dead_letter,omitempty"`
	Error      string `json:"error,omitempty"`
	// Detail says more, in words.
	Detail string `json:"detail,omitempty"`
	// Purged: the letter was deleted from the dead-letter stream (Purge).
	Purged bool `json:"purged,omitempty"`
	// Message is what was (or, dry, would be) sent.
	Message Message `json:"message"`
}

// Message is a message as a replay sends it.
type Message struct {
	Subject string      `json:"subject"`
	Header  nats.Header `json:"header"`
	Body    string      `json:"body"`
}

// messageOf describes m.
func messageOf(m *nats.Msg) Message {
	return Message{Subject: m.Subject, Header: m.Header, Body: string(m.Data)}
}

// Report is a replay's results, per letter and in total.
type Report struct {
	Results      []Result `json:"results"`
	Applied      int      `json:"applied"`
	Duplicate    int      `json:"duplicate"`
	StillFailing int      `json:"still_failing"`
	Pending      int      `json:"pending"`
	Dry          int      `json:"dry_run,omitempty"`
}

// Failed reports whether a letter is still failing or its outcome unknown.
func (r Report) Failed() bool { return r.StillFailing > 0 || r.Pending > 0 }

// place is a message stored in a stream.
type place struct {
	stream string
	seq    uint64
}

// Replay republishes each letter (Letter.Message) to the replay stream, on
// {ReplayPrefix}.{the subject its stream stored the original under}, with
// the letter's own Nats-Msg-Id (ingress.ReplayMsgID) and the original's
// dedup key (Ingest-Dedup-Key); the stream the original came from sources
// the replay stream and stores the copy under the original's subject, in
// its customer's partition. Then Replay watches until each has an outcome
// or the wait is over:
//
//   - it finds the copy in the original's stream (its Nats-Stream-Source
//     header names the replay stream and sequence);
//   - it reads the ingress's consumers: the one whose filter holds the
//     copy's stored subject has acked it once its ack floor reaches its
//     sequence;
//   - then the dead letters stored since the replay began (and, for a
//     duplicate, the earlier ones of its subject): one from the copy's
//     stream and sequence (Ingest-Stream, Ingest-Sequence) means it is still
//     failing. The ingress publishes a dead letter before it acks the
//     message, so an ack seen with no such letter after it is Applied (or
//     Duplicate).
//
// What stays undecided is Pending. With Purge, applied and duplicate
// letters, and only those, are deleted from the dead-letter stream: each
// letter's outcome is its own message's, never another letter's.
func (b Bus) Replay(ctx context.Context, letters []Letter, opts ReplayOptions) (Report, error) {
	b = b.withDefaults()
	if opts.Wait <= 0 {
		opts.Wait = 30 * time.Second
	}
	if opts.Poll <= 0 {
		opts.Poll = 250 * time.Millisecond
	}
	began := time.Now()
	rep := Report{Results: make([]Result, len(letters))}
	stored := make([]string, len(letters))
	streams := map[string]jetstream.StreamConfig{}
	for i, l := range letters {
		if l.Stream == "" {
			return rep, fmt.Errorf("dead letter %d names no stream (header %s)", l.Sequence, ingress.HeaderStream)
		}
		cfg, ok := streams[l.Stream]
		if !ok {
			st, err := b.JS.Stream(ctx, l.Stream)
			if err != nil {
				return rep, fmt.Errorf("stream %s of dead letter %d: %w", l.Stream, l.Sequence, err)
			}
			cfg = st.CachedInfo().Config
			streams[l.Stream] = cfg
		}
		stored[i] = ingress.StoredSubject(cfg, l.Subject)
		id := ingress.ReplayMsgID(b.Stream, l.Sequence)
		rep.Results[i] = Result{Letter: l, MsgID: id, Message: messageOf(l.Message(ingress.ReplaySubject(b.ReplayPrefix, stored[i]), id))}
	}
	if opts.DryRun {
		for i := range rep.Results {
			rep.Results[i].Outcome = DryRun
		}
		rep.Dry = len(letters)
		return rep, nil
	}
	dead, err := b.JS.Stream(ctx, b.Stream)
	if err != nil {
		return rep, fmt.Errorf("dead-letter stream %s: %w", b.Stream, err)
	}
	info, err := dead.Info(ctx)
	if err != nil {
		return rep, fmt.Errorf("dead-letter stream %s: %w", b.Stream, err)
	}
	replays, err := b.JS.Stream(ctx, b.ReplayStream)
	if err != nil {
		return rep, fmt.Errorf("replay stream %s (the ingress creates it at start): %w", b.ReplayStream, err)
	}
	// A duplicate's copy was stored within the replay stream's duplicate
	// window: the copies are looked for from before it.
	since := began.Add(-replays.CachedInfo().Config.Duplicates - time.Minute)
	w := &watch{bus: b, from: info.State.LastSeq + 1, letters: map[place]Letter{}, stored: map[place]string{}, unconsumed: map[place]bool{}}
	var open []int
	for i := range rep.Results {
		r := &rep.Results[i]
		m := r.Letter.Message(ingress.ReplaySubject(b.ReplayPrefix, stored[i]), r.MsgID)
		ack, err := b.JS.PublishMsg(ctx, m)
		if err != nil {
			return rep, fmt.Errorf("replaying dead letter %d of %s on %s: %w", r.Letter.Sequence, r.Letter.Subject, m.Subject, err)
		}
		r.ReplaySequence = ack.Sequence
		if ack.Duplicate {
			r.Outcome = Duplicate
			// The copy JetStream kept, an earlier replay's, may have failed.
			if err := w.readSubject(ctx, r.Letter.Subject); err != nil {
				return rep, err
			}
		}
		open = append(open, i)
	}
	deadline := time.Now().Add(opts.Wait)
	for len(open) > 0 {
		acked := make(map[int]bool, len(open))
		w.consumers = map[string][]*jetstream.ConsumerInfo{}
		for _, i := range open {
			r := &rep.Results[i]
			if r.Sequence == 0 {
				seq, err := w.findCopy(ctx, r.Letter.Stream, stored[i], r.ReplaySequence, since)
				if err != nil {
					return rep, err
				}
				if seq == 0 {
					continue
				}
				r.Stream, r.Sequence = r.Letter.Stream, seq
			}
			ok, err := w.acked(ctx, r.Stream, r.Sequence)
			if err != nil {
				return rep, err
			}
			acked[i] = ok
		}
		if err := w.readNew(ctx); err != nil {
			return rep, err
		}
		var still []int
		for _, i := range open {
			r := &rep.Results[i]
			if r.Sequence == 0 {
				still = append(still, i)
				continue
			}
			if l, ok := w.letters[place{r.Stream, r.Sequence}]; ok {
				r.Outcome, r.DeadLetter, r.Error = StillFailing, l.Sequence, l.Error
				continue
			}
			if acked[i] {
				if r.Outcome != Duplicate {
					r.Outcome = Applied
				}
				continue
			}
			still = append(still, i)
		}
		open = still
		if len(open) == 0 || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return rep, ctx.Err()
		case <-time.After(opts.Poll):
		}
	}
	for _, i := range open {
		r := &rep.Results[i]
		r.Outcome = Pending
		why := "not acked by the ingress within " + opts.Wait.String()
		switch {
		case r.Sequence == 0:
			why = "stream " + r.Letter.Stream + " did not take it from the replay stream " + b.ReplayStream + " within " + opts.Wait.String() + ": has the ingress of this release started on it?"
		case w.unconsumed[place{r.Stream, r.Sequence}]:
			why = "no consumer of the ingress holds its subject: is the ingress running on this stream?"
		}
		r.Detail = strings.TrimPrefix(r.Detail+"; ", "; ") + why
	}
	for i := range rep.Results {
		r := &rep.Results[i]
		switch r.Outcome {
		case Applied:
			rep.Applied++
		case Duplicate:
			rep.Duplicate++
		case StillFailing:
			rep.StillFailing++
		case Pending:
			rep.Pending++
		}
		if opts.Purge && (r.Outcome == Applied || r.Outcome == Duplicate) {
			if err := dead.DeleteMsg(ctx, r.Letter.Sequence); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
				return rep, fmt.Errorf("purging dead letter %d: %w", r.Letter.Sequence, err)
			}
			r.Purged = true
		}
	}
	return rep, nil
}

// streamSourceHeader is the header JetStream gives a message a stream
// stored from another it sources: "{source stream} {sequence} ...".
const streamSourceHeader = "Nats-Stream-Source"

// findCopy returns the sequence of the copy of replay stream message
// replaySeq that stream stored under subject (stored at since or later;
// its Nats-Stream-Source header names the replay stream and replaySeq), 0
// while it has none.
func (w *watch) findCopy(ctx context.Context, stream, subject string, replaySeq uint64, since time.Time) (uint64, error) {
	st, err := w.bus.JS.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", stream, err)
	}
	last := st.CachedInfo().State.LastSeq
	if last == 0 {
		return 0, nil
	}
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject}, HeadersOnly: true, InactiveThreshold: 10 * time.Second,
		DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &since,
	}
	want := strconv.FormatUint(replaySeq, 10)
	var found uint64
	err = scan(ctx, st, stream, cfg, last, func(m jetstream.Msg, meta *jetstream.MsgMetadata) bool {
		f := strings.Fields(m.Headers().Get(streamSourceHeader))
		if len(f) >= 2 && f[1] == want && (f[0] == w.bus.ReplayStream || strings.HasPrefix(f[0], w.bus.ReplayStream+":")) {
			found = meta.Sequence.Stream
			return false
		}
		return true
	})
	return found, err
}

// watch is what Replay has seen so far: the dead letters by the place of
// the message they hold, and the stored subjects of the replayed messages.
type watch struct {
	bus Bus
	// from is the first dead-letter sequence not read yet.
	from    uint64
	letters map[place]Letter
	stored  map[place]string
	// consumers holds the ingress's consumers of each stream, read once a
	// round.
	consumers map[string][]*jetstream.ConsumerInfo
	// unconsumed holds the messages no consumer of the ingress filters.
	unconsumed map[place]bool
}

// add records l by the place of its message.
func (w *watch) add(l Letter) {
	if l.Stream != "" {
		w.letters[place{l.Stream, l.StreamSequence}] = l
	}
}

// readNew reads the dead letters stored since the last read.
func (w *watch) readNew(ctx context.Context) error {
	return w.bus.read(ctx, w.bus.Prefix+".>", w.from, time.Time{}, func(l Letter) {
		w.add(l)
		w.from = l.Sequence + 1
	})
}

// readSubject reads every dead letter of the original subject.
func (w *watch) readSubject(ctx context.Context, subject string) error {
	return w.bus.read(ctx, w.bus.Prefix+"."+subject, 0, time.Time{}, w.add)
}

// acked reports whether the ingress's consumer of the message at seq in
// stream has acked it: its ack floor has reached it.
func (w *watch) acked(ctx context.Context, stream string, seq uint64) (bool, error) {
	st, err := w.bus.JS.Stream(ctx, stream)
	if err != nil {
		return false, fmt.Errorf("stream %s: %w", stream, err)
	}
	p := place{stream, seq}
	subject, ok := w.stored[p]
	if !ok {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			return false, fmt.Errorf("message %d of stream %s: %w", seq, stream, err)
		}
		subject = m.Subject
		w.stored[p] = subject
	}
	infos, ok := w.consumers[stream]
	if !ok {
		list := st.ListConsumers(ctx)
		for ci := range list.Info() {
			if w.ingressConsumer(ci.Name) {
				infos = append(infos, ci)
			}
		}
		if err := list.Err(); err != nil {
			return false, fmt.Errorf("consumers of stream %s: %w", stream, err)
		}
		w.consumers[stream] = infos
	}
	found := false
	for _, ci := range infos {
		if !filters(ci.Config, subject) {
			continue
		}
		found = true
		if ci.AckFloor.Stream < seq {
			return false, nil
		}
	}
	w.unconsumed[p] = !found
	return found, nil
}

// ingressConsumer reports whether name is one of the ingress's durables.
func (w *watch) ingressConsumer(name string) bool {
	if name == w.bus.PointsDurable || name == w.bus.EventsDurable {
		return true
	}
	p, ok := strings.CutPrefix(name, w.bus.PointsDurable+"-")
	if !ok {
		return false
	}
	_, err := strconv.Atoi(p)
	return err == nil
}

// filters reports whether a consumer of cfg receives messages stored on
// subject.
func filters(cfg jetstream.ConsumerConfig, subject string) bool {
	fs := cfg.FilterSubjects
	if cfg.FilterSubject != "" {
		fs = append(fs, cfg.FilterSubject)
	}
	if len(fs) == 0 {
		return true
	}
	for _, f := range fs {
		if SubjectMatches(f, subject) {
			return true
		}
	}
	return false
}
