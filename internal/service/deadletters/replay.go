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
)

// Outcome is what became of a replayed letter.
type Outcome string

const (
	// Applied: the ingress acked the republished message and dead-lettered
	// it not again. An event the entity already had (its dedup window
	// answered it as a duplicate) is acked the same way and cannot be told
	// apart on the bus: it is reported applied, and counted once.
	Applied Outcome = "applied"
	// Duplicate: JetStream's PubAck said Duplicate (the same Nats-Msg-Id was
	// stored within the stream's duplicate window, by an earlier replay),
	// and that earlier copy was acked and not dead-lettered.
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
	// MsgID is the Nats-Msg-Id it was sent with; Stream and Sequence where
	// it was stored (for a duplicate, the copy JetStream kept).
	MsgID    string `json:"msg_id"`
	Stream   string `json:"stream,omitempty"`
	Sequence uint64 `json:"stream_sequence,omitempty"`
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

// Replay republishes each letter (Letter.Message) to its original subject,
// then watches until each has an outcome or the wait is over:
//
//   - it reads the ingress's consumers first: the one whose filter holds the
//     message's stored subject has acked it once its ack floor reaches its
//     sequence;
//   - then the dead letters stored since the replay began (and, for a
//     duplicate, the earlier ones of its subject): one from the message's
//     stream and sequence (Ingest-Stream, Ingest-Sequence) means it is still
//     failing. The ingress publishes a dead letter before it acks the
//     message, so an ack seen with no such letter after it is Applied (or
//     Duplicate).
//
// What stays undecided is Pending. With Purge, applied and duplicate
// letters are deleted from the dead-letter stream.
func (b Bus) Replay(ctx context.Context, letters []Letter, opts ReplayOptions) (Report, error) {
	b = b.withDefaults()
	if opts.Wait <= 0 {
		opts.Wait = 30 * time.Second
	}
	if opts.Poll <= 0 {
		opts.Poll = 250 * time.Millisecond
	}
	rep := Report{Results: make([]Result, len(letters))}
	for i, l := range letters {
		rep.Results[i] = Result{Letter: l, MsgID: l.ReplayID(), Message: messageOf(l.Message())}
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
	w := &watch{bus: b, from: info.State.LastSeq + 1, letters: map[place]Letter{}, stored: map[place]string{}, unconsumed: map[place]bool{}}
	var open []int
	for i := range rep.Results {
		r := &rep.Results[i]
		ack, err := b.JS.PublishMsg(ctx, r.Letter.Message())
		if err != nil {
			return rep, fmt.Errorf("replaying dead letter %d on %s: %w", r.Letter.Sequence, r.Letter.Subject, err)
		}
		r.Stream, r.Sequence = ack.Stream, ack.Sequence
		if ack.Duplicate {
			r.Outcome = Duplicate
			// The copy JetStream kept may have failed before: an earlier
			// replay, or the original itself still inside the window.
			if err := w.readSubject(ctx, r.Letter.Subject); err != nil {
				return rep, err
			}
			if ack.Stream == r.Letter.Stream && ack.Sequence == r.Letter.StreamSequence {
				r.Detail = "JetStream dropped it as a duplicate of the original, still inside the stream's duplicate window; replay again after it"
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
		if w.unconsumed[place{r.Stream, r.Sequence}] {
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
