package changefeed

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/entityflow/entityflow/internal/infra/backoff"
	"github.com/entityflow/entityflow/internal/service/ingress"
	rewardswf "github.com/entityflow/entityflow/workflows/rewards"
)

// InboxPrefix is the inbox prefix of the feed's connection, where
// JetStream's publish acknowledgements and API answers come: the feed's own
// rather than _INBOX, so that on the secured bus its identity (secure.conf's
// FEED) subscribes to its own answers only, never to the ingress's pulled
// messages on _INBOX.>.
const InboxPrefix = "_INBOX_feed"

// Feed is a worker's change feed: the publisher behind the PublishChanges
// activity, connected in the background so that a worker whose feed is on
// polls its task queues while NATS is down. Until NATS has answered and the
// stream is ensured, every publication fails, retryably: the changes wait in
// their entities' outboxes, and the workflow publishes them again (the
// local activity, then the PublishChanges activity, retried without limit),
// each once, when the feed is ready.
type Feed struct {
	cfg     Config
	pub     atomic.Pointer[Publisher]
	mu      sync.Mutex
	waiting error // why the feed is not ready yet
	stop    context.CancelFunc
	done    chan struct{}
}

// Start returns the feed at once and, in the background, connects to NATS
// at url with sec (waiting while no server answers; retrying a refusal, a
// credential or certificate the server does not take, every minute at most,
// each logged as an error), then makes sure the stream is there (EnsureStream,
// retried the same way), until ctx ends or Close. Settings that cannot work
// (a certificate without its key, two credentials, an unreadable file) fail
// here, before anything connects.
func Start(ctx context.Context, url string, sec ingress.Security, cfg Config, logger *slog.Logger) (*Feed, error) {
	if err := sec.Validate(); err != nil {
		return nil, fmt.Errorf("NATS settings: %w", err)
	}
	ctx, stop := context.WithCancel(ctx)
	f := &Feed{cfg: cfg, stop: stop, done: make(chan struct{}), waiting: fmt.Errorf("not connected to NATS at %s yet", url)}
	go f.run(ctx, url, sec, logger)
	return f, nil
}

// run connects, ensures the stream, makes the publisher available and holds
// the connection until ctx ends.
func (f *Feed) run(ctx context.Context, url string, sec ingress.Security, logger *slog.Logger) {
	defer close(f.done)
	always := func(error) bool { return true }
	refused := backoff.Policy{Initial: time.Second, Max: time.Minute, Logger: logger, Level: slog.LevelError}
	nc, err := backoff.Retry(ctx, refused, always, func(ctx context.Context) (*nats.Conn, error) {
		// No reconnect buffer: while the connection is down a publication
		// fails at once (and the activity is retried) instead of waiting in
		// the client to go out after the outage, perhaps after the duplicate
		// window, when another worker has published it and later ones.
		nc, err := ingress.Connect(ctx, url, "entityflow worker change feed", sec, logger,
			nats.ReconnectBufSize(-1), nats.CustomInboxPrefix(InboxPrefix))
		f.setWaiting(err)
		return nc, err
	}, "change feed: NATS refused the connection; changes wait in the entities' outboxes; retrying", "url", url, "nats_security", sec.String())
	if err != nil {
		return // ctx ended
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err == nil {
		err = backoff.Do(ctx, backoff.Policy{Initial: time.Second, Max: 30 * time.Second, Logger: logger, Level: slog.LevelWarn}, always,
			func(ctx context.Context) error {
				sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				err := EnsureStream(sctx, js, f.cfg)
				f.setWaiting(err)
				return err
			}, "change feed: stream not ready; changes wait in the entities' outboxes; retrying", "stream", f.cfg.stream())
	}
	if err != nil {
		f.setWaiting(err)
		if ctx.Err() == nil {
			logger.Error("change feed: no JetStream; changes wait in the entities' outboxes", "error", err)
		}
	} else {
		f.pub.Store(&Publisher{JS: js, Stream: f.cfg.stream(), Prefix: f.cfg.prefix()})
		logger.Info("change feed on", "mode", f.cfg.Mode, "stream", f.cfg.stream(), "subjects", f.cfg.prefix()+".{tenant}.{customer}",
			"nats", nc.ConnectedUrlRedacted(), "nats_security", sec.String())
	}
	<-ctx.Done()
}

// setWaiting records why the feed is not ready, when err says.
func (f *Feed) setWaiting(err error) {
	if err == nil {
		return
	}
	f.mu.Lock()
	f.waiting = err
	f.mu.Unlock()
}

// Ready reports whether the feed publishes: connected to NATS, its stream
// ensured. A connection lost later leaves it ready; publications then fail
// until the client has reconnected.
func (f *Feed) Ready() bool { return f.pub.Load() != nil }

// Publish publishes changes as Publisher.Publish does once the feed is
// ready, and fails (retryably) before, saying why.
func (f *Feed) Publish(ctx context.Context, changes []rewardswf.Change, again bool) error {
	p := f.pub.Load()
	if p == nil {
		f.mu.Lock()
		why := f.waiting
		f.mu.Unlock()
		return fmt.Errorf("change feed not ready, the changes wait in the outbox: %w", why)
	}
	return p.Publish(ctx, changes, again)
}

// Close stops connecting, or closes the connection, and returns once the
// background work has ended.
func (f *Feed) Close() {
	f.stop()
	<-f.done
}
