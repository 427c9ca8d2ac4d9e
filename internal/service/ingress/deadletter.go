package ingress

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// Headers of a dead letter, beside the original message's own (whose Nats-*
// headers are renamed Ingest-Original-*, so that JetStream does not act on
// them again).
const (
	HeaderReason     = "Ingest-Reason"
	HeaderError      = "Ingest-Error"
	HeaderStream     = "Ingest-Stream"
	HeaderSequence   = "Ingest-Sequence"
	HeaderSubject    = "Ingest-Subject"
	HeaderConsumer   = "Ingest-Consumer"
	HeaderDeliveries = "Ingest-Deliveries"
	HeaderAttempts   = "Ingest-Attempts"
	HeaderDedupKey   = "Ingest-Dedup-Key"
	HeaderDeadAt     = "Ingest-Dead-At"
)

// deadLetter is a message that can never be applied, as it goes to the
// dead-letter stream.
type deadLetter struct {
	Subject string
	Data    []byte
	Header  map[string][]string
	// ID names the letter for the bus's duplicate detection, so that a
	// second publish of it (after a crash between publish and ack) is
	// dropped.
	ID string
}

// deadLetters publishes dead letters: the dispatcher's one way out besides
// ack and nak (jsDeadLetters, jetstream.go, for JetStream).
type deadLetters interface {
	publish(ctx context.Context, l deadLetter) error
}

// deadLetter publishes j to the dead letters, on
// {DeadLetterPrefix}.{subject}, with its body, its headers and the reason.
// Its ID is derived from the original's stream and sequence.
func (d *dispatcher) deadLetter(ctx context.Context, j *job, reason string, cause error) error {
	h := make(map[string][]string, len(j.msg.Header())+10)
	for k, vs := range j.msg.Header() {
		h[k] = append([]string(nil), vs...)
	}
	set := func(k, v string) { h[k] = []string{v} }
	seq := strconv.FormatUint(j.pos.Sequence, 10)
	set(HeaderReason, reason)
	if cause != nil {
		set(HeaderError, headerValue(cause.Error()))
	}
	set(HeaderStream, j.pos.Stream)
	set(HeaderSequence, seq)
	set(HeaderSubject, j.subject)
	set(HeaderConsumer, j.pos.Consumer)
	set(HeaderDeliveries, strconv.FormatUint(j.pos.Delivered, 10))
	set(HeaderAttempts, strconv.FormatUint(j.attempts, 10))
	if j.dedupKey != "" {
		set(HeaderDedupKey, headerValue(j.dedupKey))
	}
	set(HeaderDeadAt, time.Now().UTC().Format(time.RFC3339))
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return d.dead.publish(pctx, deadLetter{
		Subject: d.cfg.DeadLetterPrefix + "." + j.subject, Data: j.msg.Data(), Header: h,
		ID: "dead:" + j.pos.Stream + ":" + seq,
	})
}

// headerValue makes s a header value: one line, at most 1 KiB.
func headerValue(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, s)
	if len(s) > 1024 {
		s = s[:1021] + "..."
	}
	return s
}
