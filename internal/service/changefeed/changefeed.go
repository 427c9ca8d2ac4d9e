// Package changefeed publishes the rewards entities' change feed to NATS
// JetStream: the stream it goes to (created or completed at worker start)
// and the publisher behind the PublishChanges activity, which sends an
// entity's changes one by one under the message ID {workflow ID}:{entity run ID}:{seq},
// each once the one before it is acknowledged (docs/change-feed.md).
package changefeed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/entityflow/entityflow/internal/service/ingress"
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
// {prefix}.{tenant}.{customer}, the default tenant written "default". A
// customer ID whose dots would leave an empty token (a leading, trailing or
// doubled dot, which customer IDs may have) is written with every dot as an
// underscore, for NATS refuses a subject with an empty token; the payload
// keeps the ID as it is.
func Subject(prefix, tenantID, customer string) string {
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
}

// Publish sends each change in order and waits for its acknowledgement
// before the next, so the stream never holds a change before one that
// precedes it. Publishing again (again: an earlier publication of some of
// the changes failed, or a run before handed them), it first reads the last
// change the stream holds on the entity's subject and skips the changes up
// to it, so a change is stored
// once even when it is published again after the duplicate window (a
// publication cut off by an outage longer than the window); a change sent
// twice within the window (two publishers at once: a run's abandoned
// publication and the next run's) is acknowledged as a duplicate and not
// stored again.
func (p *Publisher) Publish(ctx context.Context, changes []rewardswf.Change, again bool) error {
	if len(changes) == 0 {
		return nil
	}
	var stored int64
	if again {
		var err error
		subject := Subject(p.Prefix, changes[0].TenantID, changes[0].CustomerID)
		if stored, err = p.lastStored(ctx, subject, changes[0]); err != nil {
			return err
		}
	}
	for _, c := range changes {
		if c.Seq <= stored {
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

// lastStored returns the seq of the last change of like's entity (the same
// workflow ID and entity run) that the stream holds on subject, 0 if the
// last message there is none of its (none at all, or another entity's: a
// customer enrolled again, or one whose subject another's ID shares).
func (p *Publisher) lastStored(ctx context.Context, subject string, like rewardswf.Change) (int64, error) {
	gctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	stream, err := p.JS.Stream(gctx, p.Stream)
	if err != nil {
		return 0, fmt.Errorf("looking up stream %s: %w", p.Stream, err)
	}
	msg, err := stream.GetLastMsgForSubject(gctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading the last change on %s: %w", subject, err)
	}
	var last rewardswf.Change
	if err := json.Unmarshal(msg.Data, &last); err != nil || last.WorkflowID != like.WorkflowID || last.EntityRunID != like.EntityRunID {
		return 0, nil
	}
	return last.Seq, nil
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

// Open connects to NATS at url with sec (waiting until a server answers),
// makes sure the feed's stream is there and returns its publisher; close
// ends the connection.
func Open(ctx context.Context, url string, sec ingress.Security, cfg Config, logger *slog.Logger) (p *Publisher, closeConn func(), err error) {
	// No reconnect buffer: while the connection is down a publication fails
	// at once (and the activity is retried) instead of waiting in the
	// client to go out after the outage, perhaps after the duplicate
	// window, when another worker has published it and later ones.
	nc, err := ingress.Connect(ctx, url, "entityflow worker change feed", sec, logger, nats.ReconnectBufSize(-1))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("JetStream on %s: %w", nc.ConnectedUrlRedacted(), err)
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := EnsureStream(sctx, js, cfg); err != nil {
		nc.Close()
		return nil, nil, err
	}
	logger.Info("change feed on", "mode", cfg.Mode, "stream", cfg.stream(), "subjects", cfg.prefix()+".{tenant}.{customer}",
		"nats", nc.ConnectedUrlRedacted(), "nats_security", sec.String())
	return &Publisher{JS: js, Stream: cfg.stream(), Prefix: cfg.prefix()}, nc.Close, nil
}
