package ingress

import (
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// ReplaySubject returns the subject a dead letter's message is replayed on:
// {replayPrefix}.{stored}, stored being the subject its stream keeps it under
// (a point event's partition subject, StoredPointsSubject; an envelope's
// published subject). The points and events streams source the replay
// stream and store the message under stored again, so it lands in its
// customer's partition, behind the customer's earlier messages.
func ReplaySubject(replayPrefix, stored string) string {
	return replayPrefix + "." + stored
}

// ReplayMsgID is the Nats-Msg-Id of a replay of the dead letter at sequence
// seq of deadStream: the letter's own identity, unique to it and so to its
// tenant and entity. Two letters never share it, whatever their producers'
// IDs; a replay run twice within the replay stream's duplicate window
// stores the letter once; and it is never the original's Nats-Msg-Id, so a
// replay right after the original is not taken for it.
func ReplayMsgID(deadStream string, seq uint64) string {
	return "replay:" + deadStream + ":" + strconv.FormatUint(seq, 10)
}

// replaySource is how a points or events stream sources the replay stream:
// the replays of its own messages, {ReplayPrefix}.{stored} for a stored
// subject matching storedFilter, stored under stored again (the filter's
// '*' tokens carried over as {{wildcard(i)}}, its '>' as '>').
func replaySource(cfg Config, storedFilter string) *jetstream.StreamSource {
	tokens := strings.Split(storedFilter, ".")
	n := 0
	for i, t := range tokens {
		if t == "*" {
			n++
			tokens[i] = "{{wildcard(" + strconv.Itoa(n) + ")}}"
		}
	}
	return &jetstream.StreamSource{
		Name: cfg.ReplayStream,
		SubjectTransforms: []jetstream.SubjectTransformConfig{{
			Source: ReplaySubject(cfg.ReplayPrefix, storedFilter), Destination: strings.Join(tokens, "."),
		}},
	}
}
