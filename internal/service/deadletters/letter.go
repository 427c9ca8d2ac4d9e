// Package deadletters reads the ingress's dead-letter stream without
// consuming it and replays letters to their original subjects under their
// dedup keys (starter deadletters list|replay): what an operator does once
// the cause of a dead letter is fixed.
package deadletters

import (
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/entityflow/entityflow/internal/service/ingress"
)

// originalPrefix leads the headers of a dead letter that were the original
// message's Nats-* headers (the ingress renames them so that JetStream does
// not act on them again).
const originalPrefix = "Ingest-Original-"

// bookkeepingPrefix leads the headers the ingress adds to a dead letter.
const bookkeepingPrefix = "Ingest-"

// Letter is one dead letter as read from the dead-letter stream.
type Letter struct {
	// Sequence is the letter's sequence in the dead-letter stream; Time when
	// it was stored there.
	Sequence uint64    `json:"sequence"`
	Time     time.Time `json:"time"`
	// Reason, Error, Subject (the subject the original was published on),
	// DedupKey, Stream and StreamSequence (the original's place) come from
	// the letter's Ingest-* headers.
	Reason         string `json:"reason"`
	Subject        string `json:"subject"`
	DedupKey       string `json:"dedup_key,omitempty"`
	Error          string `json:"error,omitempty"`
	Stream         string `json:"stream,omitempty"`
	StreamSequence uint64 `json:"stream_sequence,omitempty"`
	// Header holds every header of the letter; Body the original's body.
	Header nats.Header `json:"header,omitempty"`
	Body   string      `json:"body"`
}

// letterFrom reads a letter stored at sequence on subject, at stored, with
// header h and body data; prefix is the dead-letter subject prefix, the
// fallback for a letter without an Ingest-Subject header.
func letterFrom(prefix, subject string, sequence uint64, stored time.Time, h nats.Header, data []byte) Letter {
	l := Letter{
		Sequence: sequence, Time: stored.UTC(),
		Reason: h.Get(ingress.HeaderReason), Subject: h.Get(ingress.HeaderSubject),
		DedupKey: h.Get(ingress.HeaderDedupKey), Error: h.Get(ingress.HeaderError),
		Stream: h.Get(ingress.HeaderStream), Header: h, Body: string(data),
	}
	if l.Subject == "" {
		l.Subject = strings.TrimPrefix(subject, prefix+".")
	}
	l.StreamSequence, _ = strconv.ParseUint(h.Get(ingress.HeaderSequence), 10, 64)
	return l
}

// ReplayKey is the dedup key a replay of l is applied under, which it
// carries in its Ingest-Dedup-Key header: the letter's dedup key (the one
// the ingress applied the original under, so the entity's dedup window or
// the run's workflow ID still recognises it); for a letter refused before
// its key was read (its subject or tenant), the original's Nats-Msg-Id,
// else {stream}:{sequence} of the original, the key the ingress gives a
// point event without one.
func (l Letter) ReplayKey() string {
	if l.DedupKey != "" {
		return l.DedupKey
	}
	if id := l.Header.Get(originalPrefix + "Msg-Id"); id != "" {
		return id
	}
	return l.Stream + ":" + strconv.FormatUint(l.StreamSequence, 10)
}

// Message is what a replay of l publishes on subject (the replay stream's,
// ingress.ReplaySubject): its original body, with the original's headers
// (the Ingest-Original-* ones named Nats-* again, but for the
// Nats-Expected-* checks of the first publish, which would fail now, the
// Nats-Stream-Source of an earlier replay and the Nats-Pin-Id of a pinned
// consumer's delivery), without the ingress's
// Ingest-* bookkeeping and the letter's own Nats-* headers, and with
// Nats-Msg-Id = msgID (the letter's own identity, ingress.ReplayMsgID) and
// Ingest-Dedup-Key = ReplayKey.
func (l Letter) Message(subject, msgID string) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = []byte(l.Body)
	for k, vs := range l.Header {
		switch {
		case strings.HasPrefix(k, originalPrefix):
			name := "Nats-" + strings.TrimPrefix(k, originalPrefix)
			if strings.HasPrefix(name, "Nats-Expected-") || name == "Nats-Stream-Source" || name == "Nats-Pin-Id" {
				continue
			}
			m.Header[name] = append([]string(nil), vs...)
		case strings.HasPrefix(k, bookkeepingPrefix), strings.HasPrefix(k, "Nats-"):
		default:
			m.Header[k] = append([]string(nil), vs...)
		}
	}
	m.Header.Set(nats.MsgIdHdr, msgID)
	m.Header.Set(ingress.HeaderDedupKey, l.ReplayKey())
	return m
}
