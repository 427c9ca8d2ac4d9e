package ingress

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/entityflow/entityflow/tenant"
)

// source is one kind of message the ingress applies, registered as data:
// which stored subjects are its (match), and how to read one (parse) into
// what applying it takes. The dispatcher routes every delivery to the first
// of its sources that matches it (receive), and knows nothing else of them:
// a third kind of message is a new source, in a file of its own
// (points.go, envelopes.go), not an edit of the dispatcher.
type source struct {
	// name labels the source's metrics and prefixes its ordering keys.
	name string
	// match reports whether a message stored under subject is the
	// source's.
	match func(subject string) bool
	// parse reads a delivery of the source's. An error is a Rejection (any
	// other is taken for an invalid payload): the message is dead-lettered
	// with what parsed could tell of it (its subject, its dedup key).
	parse func(m delivery) (parsed, error)
}

// parsed is a message read by its source: what orders it, names it and
// applies it.
type parsed struct {
	// key orders, within the source: the messages of one key are applied
	// one at a time in stream order. Empty: the stored subject.
	key string
	// subject is the one the message was published on, under which it is
	// dead-lettered. Empty: the stored subject.
	subject string
	// dedupKey names the message for the entity's dedup window.
	dedupKey string
	// tenant is whose quota the message takes a token of; empty: none.
	tenant string
	// apply applies the message alone, answering its outcome.
	apply func(ctx context.Context) (outcome string, err error)
	// batch, if set, lets the message go in one call with those of its
	// group queued behind it (newBatch).
	batch *batch
}

// unmatched stands for the source of a message none of the dispatcher's
// sources matches (its consumer and the sources disagree): it is
// dead-lettered as an invalid subject.
var unmatched = &source{name: "unmatched"}

// route returns the first source that matches subject, unmatched if none.
func (d *dispatcher) route(subject string) *source {
	if i := slices.IndexFunc(d.sources, func(s *source) bool { return s.match(subject) }); i >= 0 {
		return d.sources[i]
	}
	return unmatched
}

// receive takes a delivery from a bus: it routes it to its source, which
// reads it, and submits the job. ls is the hold on the consumer it came
// under (a partition's pin); nil if the consumer is shared.
func (d *dispatcher) receive(m delivery, ls *lease) {
	j := d.newJob(m, ls)
	if d.in.Logger.Enabled(context.Background(), slog.LevelDebug) {
		traceJob(d.in.Logger, j)
	}
	d.submit(j)
}

// newJob routes m to its source and makes its job of what the source read:
// its key is the source's name and the key the source gave (the stored
// subject if none), so that the keys of two sources never meet.
func (d *dispatcher) newJob(m delivery, ls *lease) *job {
	subject := m.Subject()
	src := d.route(subject)
	d.in.Metrics.consumed.WithLabelValues(src.name).Inc()
	var (
		p   parsed
		err error
	)
	if src == unmatched {
		err = reject(ReasonInvalidSubject, fmt.Errorf("subject %q is no source's", subject))
	} else {
		p, err = src.parse(m)
	}
	j := &job{src: src, msg: m, pos: m.Position(), lease: ls, key: src.name + "/" + cmp.Or(p.key, subject),
		subject: cmp.Or(p.subject, subject), dedupKey: p.dedupKey}
	if err != nil {
		if rej := (*Rejection)(nil); !errors.As(err, &rej) {
			err = reject(ReasonInvalidPayload, err)
		}
		j.err = err
	} else {
		j.tenant, j.apply, j.batch = p.tenant, p.apply, p.batch
	}
	return j
}

// traceJob logs, at debug level, the message's arrival and its handling's
// start and end.
func traceJob(log *slog.Logger, j *job) {
	pin := ""
	if j.lease != nil {
		pin = j.lease.pin
	}
	log = log.With("subject", j.subject, "stream_seq", j.pos.Sequence, "deliveries", j.pos.Delivered,
		"consumer", j.pos.Consumer, "pin", pin, "dedup_key", j.dedupKey)
	log.Debug("ingress: received")
	apply := j.apply
	if apply == nil {
		return
	}
	j.apply = func(ctx context.Context) (string, error) {
		log.DebugContext(ctx, "ingress: applying")
		outcome, err := apply(ctx)
		log.DebugContext(ctx, "ingress: applied", "outcome", outcome, "error", err)
		return outcome, err
	}
}

// knownTenant reports whether cfg serves tenant: all do when it names none.
func knownTenant(cfg Config, tenantID string) bool {
	if len(cfg.Tenants) == 0 {
		return true
	}
	return slices.ContainsFunc(cfg.Tenants, func(t string) bool {
		return tenant.Normalize(t) == tenant.Normalize(tenantID)
	})
}
