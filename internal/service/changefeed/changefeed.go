// Package changefeed publishes the rewards entities' change feed to NATS
// JetStream: the stream it goes to (created or completed when the worker's
// feed connects), the subjects (one token per ID), the publisher behind the
// PublishChanges activity, which sends an entity's changes one by one under
// the message ID {workflow ID}:{entity run ID}:{seq}, each once the one before
// it is acknowledged, and the Feed that connects it in the background, so that
// a worker polls its task queues while NATS is down (docs/change-feed.md).
package changefeed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/entityflow/entityflow/internal/infra/subjecttoken"
	"github.com/entityflow/entityflow/tenant"
	rewardswf "github.com/entityflow/entityflow/workflows/rewards"
)

// Defaults of the feed's stream.
const (
	// DefaultStream is the stream the feed goes to.
	DefaultStream = "REWARDS_CHANGES"
	// DefaultPrefix is the feed's subject prefix: a change goes to
	// {prefix}.{tenant}.{customer}.
	DefaultPrefix = "changes.rewards"
	// DuplicateWindow is the stream's duplicate window: longer than the
	// longest gap between two publications of one change (a PublishChanges
	// attempt, 30 s, plus its longest retry interval, 10 s, or the next
	// run's first attempt right after a ContinueAsNew), with room to spare.
	DuplicateWindow = 5 * time.Minute
	// publishTimeout bounds the wait for one change's acknowledgement.
	publishTimeout = 5 * time.Second
)

// Config is the feed a worker runs with.
type Config struct {
	// Mode is which changes the entities publish; rewardswf.FeedOff for none.
	Mode rewardswf.FeedMode
	// Stream and Prefix name the stream and the subjects' prefix; empty
	// takes DefaultStream and DefaultPrefix.
	Stream, Prefix string
}

// On reports whether the feed is on.
func (c Config) On() bool { return c.Mode != "" && c.Mode != rewardswf.FeedOff }

func (c Config) stream() string {
	if c.Stream == "" {
		return DefaultStream
	}
	return c.Stream
}

func (c Config) prefix() string {
	if c.Prefix == "" {
		return DefaultPrefix
	}
	return c.Prefix
}

// Subject returns the subject of a change of tenant's customer:
// {prefix}.{tenant}.{customer}, each ID one token (subjecttoken.Encode: a
// '.' in an ID is written %2E), the default tenant spelled "default". So
// tenant acme.eu's customer c1 (changes.rewards.acme%2Eeu.c1) and tenant
// acme's customer eu.c1 (changes.rewards.acme.eu%2Ec1) never share a subject,
// and changes.rewards.acme.> holds tenant acme's changes only. IDs without a
// '.' keep the subjects of the releases before the rule.
func Subject(prefix, tenantID, customer string) string {
	return prefix + "." + subjecttoken.Encode(tenant.Normalize(tenantID)) + "." + subjecttoken.Encode(customer)
}

// legacySubject is the subject the releases before subjecttoken gave a
// change: the IDs as they are (a dotted ID taking several tokens), a customer
// ID that would leave an empty token with its dots written as underscores.
// Those subjects may be shared by two customers; the publisher reads them
// only for its own entity's changes (see Publisher.Publish).
func legacySubject(prefix, tenantID, customer string) string {
	if strings.HasPrefix(customer, ".") || strings.HasSuffix(customer, ".") || strings.Contains(customer, "..") {
		customer = strings.ReplaceAll(customer, ".", "_")
	}
	return prefix + "." + tenant.Normalize(tenantID) + "." + customer
}

// Overlaps reports whether the feed's subjects ({feedPrefix}.>) and the
// subjects of the ingress's points stream ({pointsPrefix}.>) overlap: two
// streams of one NATS account cannot both take them, and point events and
// changes would mix.
func Overlaps(feedPrefix, pointsPrefix string) bool {
	a, b := feedPrefix+".", pointsPrefix+"."
	return len(a) >= len(b) && a[:len(b)] == b || len(b) > len(a) && b[:len(a)] == a
}

// Publisher publishes changes to the feed's stream; it implements the
// rewards activities' ChangePublisher.
type Publisher struct {
	JS     jetstream.JetStream
	Stream string
	Prefix string
	// handle is the stream's, looked up by the first read and kept (a read
	// then costs one request), dropped when a read fails.
	handle atomic.Pointer[jetstream.Stream]
}

// stream returns the stream's handle, looking it up the first time.
func (p *Publisher) stream(ctx context.Context) (jetstream.Stream, error) {
	if h := p.handle.Load(); h != nil {
		return *h, nil
	}
	s, err := p.JS.Stream(ctx, p.Stream)
	if err != nil {
		return nil, fmt.Errorf("looking up stream %s: %w", p.Stream, err)
	}
	p.handle.Store(&s)
	return s, nil
}

// Publish sends each change in order and waits for its acknowledgement
// before the next, so the stream never holds a change before one that
// precedes it. Publishing again (again: an earlier publication of some of
// the changes failed, or a run before handed them), it first finds how far
// the stream holds the entity's changes (stored) and skips those, so a change
// is stored once even when it is published again after the duplicate window
// (a publication cut off by an outage longer than the window); a change sent
// twice within the window (two publishers at once: a run's abandoned
// publication and the next run's) is acknowledged as a duplicate and not
// stored again.
func (p *Publisher) Publish(ctx context.Context, changes []rewardswf.Change, again bool) error {
	if len(changes) == 0 {
		return nil
	}
	var done int64
	if again {
		var err error
		if done, err = p.stored(ctx, changes); err != nil {
			return err
		}
	}
	for _, c := range changes {
		if c.Seq <= done {
			continue
		}
		data, err := json.Marshal(c)
		if err != nil {
			return fmt.Errorf("encoding change %s: %w", c.MsgID(), err)
		}
		msg := &nats.Msg{Subject: Subject(p.Prefix, c.TenantID, c.CustomerID), Data: data, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, c.MsgID())
		pctx, cancel := context.WithTimeout(ctx, publishTimeout)
		_, err = p.JS.PublishMsg(pctx, msg, jetstream.WithExpectStream(p.Stream))
		cancel()
		if err != nil {
			return fmt.Errorf("publishing change %s to %s: %w", c.MsgID(), msg.Subject, err)
		}
	}
	return nil
}

// stored returns the seq up to which the stream holds the changes of the
// entity whose changes (in seq order) are published again, read from the
// last message on the entity's subject, which is the workflow ID's alone:
//
//   - one of the entity's own (same workflow ID and entity run): its seq;
//   - one of a later entity of the workflow ID (the customer unenrolled and
//     enrolled again; its changes happened after this entity's): all of
//     them, for this entity has ended, and an entity ends only once the
//     stream holds each of its changes, so this publication (an attempt that
//     outlived its entity) brings nothing new;
//   - one of an earlier entity of the workflow ID, none, or anything else:
//     none, for an earlier entity's changes all precede this one's.
//
// "Later" and "earlier" compare the changes' At, the workflow time they
// happened: a re-enrolled customer's new entity starts after the old one
// ended. A dotted ID also had the subject of the releases before
// subjecttoken (legacySubject), where the entity's first changes may be;
// the last message there counts when it is the entity's own.
func (p *Publisher) stored(ctx context.Context, changes []rewardswf.Change) (int64, error) {
	first := changes[0]
	gctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	stream, err := p.stream(gctx)
	if err != nil {
		return 0, err
	}
	subject := Subject(p.Prefix, first.TenantID, first.CustomerID)
	last, err := lastChange(gctx, stream, subject)
	if err != nil {
		p.handle.Store(nil) // perhaps a stream deleted, or its settings changed
		return 0, err
	}
	var done int64
	switch {
	case last == nil:
	case sameEntity(*last, first):
		done = last.Seq
	case last.WorkflowID == first.WorkflowID && last.At.After(first.At):
		return changes[len(changes)-1].Seq, nil
	}
	if legacy := legacySubject(p.Prefix, first.TenantID, first.CustomerID); legacy != subject {
		old, err := lastChange(gctx, stream, legacy)
		if err != nil {
			p.handle.Store(nil)
			return 0, err
		}
		if old != nil && sameEntity(*old, first) {
			done = max(done, old.Seq)
		}
	}
	return done, nil
}

// lastChange returns the last message stream holds on subject, nil when
// there is none or it is no change.
func lastChange(ctx context.Context, stream jetstream.Stream, subject string) (*rewardswf.Change, error) {
	msg, err := stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the last change on %s: %w", subject, err)
	}
	var c rewardswf.Change
	if err := json.Unmarshal(msg.Data, &c); err != nil {
		return nil, nil
	}
	return &c, nil
}

// sameEntity reports whether two changes are of one entity: the same
// workflow ID and entity run.
func sameEntity(a, b rewardswf.Change) bool {
	return a.WorkflowID == b.WorkflowID && a.EntityRunID == b.EntityRunID
}

// EnsureStream creates the feed's stream if it is missing (file storage,
// subjects {prefix}.>, DuplicateWindow), or adds to an existing one the
// subject it lacks and widens a shorter duplicate window; its other settings
// (retention, limits, replicas) are the operator's.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg Config) error {
	subject := cfg.prefix() + ".>"
	s, err := js.Stream(ctx, cfg.stream())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name: cfg.stream(), Subjects: []string{subject}, Storage: jetstream.FileStorage,
			Retention: jetstream.LimitsPolicy, Duplicates: DuplicateWindow, Description: "entityflow rewards change feed",
		})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return EnsureStream(ctx, js, cfg) // created meanwhile by another worker
		}
		if err != nil {
			return fmt.Errorf("change feed: creating stream %s (%s): %w", cfg.stream(), subject, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("change feed: stream %s: %w", cfg.stream(), err)
	}
	have := s.CachedInfo().Config
	if slices.Contains(have.Subjects, subject) && have.Duplicates >= DuplicateWindow {
		return nil
	}
	if !slices.Contains(have.Subjects, subject) {
		have.Subjects = append(have.Subjects, subject)
	}
	have.Duplicates = max(have.Duplicates, DuplicateWindow)
	if _, err := js.UpdateStream(ctx, have); err != nil {
		return fmt.Errorf("change feed: updating stream %s (%s, duplicate window %v): %w", cfg.stream(), subject, DuplicateWindow, err)
	}
	return nil
}
