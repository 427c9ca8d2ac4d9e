package deadletters

import (
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/entityflow/entityflow/internal/service/ingress"
)

func TestMessageRestoresTheOriginal(t *testing.T) {
	bookkeeping := nats.Header{
		"Ingest-Reason": {"not-enrolled"}, "Ingest-Error": {"NotEnrolled"}, "Ingest-Stream": {"REWARDS_POINTS"},
		"Ingest-Sequence": {"7"}, "Ingest-Subject": {"rewards.default.c-1.points"}, "Ingest-Consumer": {"ingest-points-3"},
		"Ingest-Deliveries": {"1"}, "Ingest-Attempts": {"1"}, "Ingest-Dead-At": {"2026-11-26T00:00:00Z"},
		"Nats-Msg-Id": {"dead:REWARDS_POINTS:7"},
	}
	with := func(extra nats.Header) nats.Header {
		h := nats.Header{}
		for k, v := range bookkeeping {
			h[k] = v
		}
		for k, v := range extra {
			h[k] = v
		}
		return h
	}
	for _, tc := range []struct {
		name   string
		header nats.Header
		want   nats.Header
	}{
		{"the dedup key travels in Ingest-Dedup-Key", with(nats.Header{"Ingest-Dedup-Key": {"k-1"}, "Ingest-Original-Msg-Id": {"m-1"}}),
			nats.Header{"Nats-Msg-Id": {"replay:INGEST_DEAD_LETTERS:3"}, "Ingest-Dedup-Key": {"k-1"}}},
		{"without a key, the original's message ID", with(nats.Header{"Ingest-Original-Msg-Id": {"m-1"}}),
			nats.Header{"Nats-Msg-Id": {"replay:INGEST_DEAD_LETTERS:3"}, "Ingest-Dedup-Key": {"m-1"}}},
		{"without either, the original's stream and sequence", with(nil),
			nats.Header{"Nats-Msg-Id": {"replay:INGEST_DEAD_LETTERS:3"}, "Ingest-Dedup-Key": {"REWARDS_POINTS:7"}}},
		{"the producer's own headers stay", with(nats.Header{"Ingest-Dedup-Key": {"k-1"}, "Trace-Id": {"a", "b"}}),
			nats.Header{"Nats-Msg-Id": {"replay:INGEST_DEAD_LETTERS:3"}, "Ingest-Dedup-Key": {"k-1"}, "Trace-Id": {"a", "b"}}},
		{"other Nats-* headers are restored", with(nats.Header{"Ingest-Dedup-Key": {"k-1"}, "Ingest-Original-TTL": {"1h"}}),
			nats.Header{"Nats-Msg-Id": {"replay:INGEST_DEAD_LETTERS:3"}, "Ingest-Dedup-Key": {"k-1"}, "Nats-TTL": {"1h"}}},
		{"the first publish's expectations, an earlier replay's source and the delivery's pin are dropped", with(nats.Header{"Ingest-Dedup-Key": {"k-1"},
			"Ingest-Original-Expected-Stream": {"S"}, "Ingest-Original-Expected-Last-Sequence": {"6"},
			"Ingest-Original-Stream-Source": {"INGEST_REPLAYS 4 x y z"}, "Ingest-Original-Pin-Id": {"p-1"}}),
			nats.Header{"Nats-Msg-Id": {"replay:INGEST_DEAD_LETTERS:3"}, "Ingest-Dedup-Key": {"k-1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := letterFrom("ingest.dead", "ingest.dead.rewards.default.c-1.points", 3, time.Now(), tc.header, []byte(`{"points":5}`))
			subject := ingress.ReplaySubject(ingress.DefaultReplayPrefix, "partition.3.rewards.default.c-1.points")
			m := l.Message(subject, ingress.ReplayMsgID(ingress.DefaultDeadLetterStream, l.Sequence))
			if m.Subject != "ingest.replay.partition.3.rewards.default.c-1.points" || string(m.Data) != `{"points":5}` {
				t.Errorf("message on %q with %q; want the replay subject and the original body", m.Subject, m.Data)
			}
			if !reflect.DeepEqual(m.Header, tc.want) {
				t.Errorf("headers %v, want %v", m.Header, tc.want)
			}
		})
	}
}

func TestLetterSubjectWithoutItsHeader(t *testing.T) {
	l := letterFrom("ingest.dead", "ingest.dead.events.t-1", 1, time.Now(), nats.Header{}, nil)
	if l.Subject != "events.t-1" {
		t.Fatalf("subject %q, want the dead-letter subject without its prefix", l.Subject)
	}
}
