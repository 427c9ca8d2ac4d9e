package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/tenant"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// feedCommand runs `starter feed stuck` and `starter feed discard`: the
// operator's view of change feed outboxes that do not drain.
func feedCommand(ctx context.Context, fs *flag.FlagSet, g globals, args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: starter feed stuck|discard [flags]")
	}
	switch args[0] {
	case "stuck":
		return feedStuckCommand(ctx, fs, g, args[1:], out)
	case "discard":
		return feedDiscardCommand(ctx, fs, g, args[1:], out)
	}
	return fmt.Errorf("unknown feed command %q: want stuck or discard", args[0])
}

// feedStuckCommand lists the entities whose outbox has not drained for at
// least -older: their publication fell back to the PublishChanges activity
// (RewardsOutboxSince), with each one's outbox length and oldest change.
func feedStuckCommand(ctx context.Context, fs *flag.FlagSet, g globals, args []string, out io.Writer) error {
	older := fs.Duration("older", 5*time.Minute, "list outboxes whose oldest unpublished change is at least this old")
	limit := fs.Int("limit", 100, "list at most this many entities")
	if err := parseFlags(fs, "feed stuck", args); err != nil {
		return err
	}
	if *older < 0 || *limit < 1 {
		return errors.New("-older must not be negative and -limit must be at least 1")
	}
	s, err := g.dial(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	now := time.Now()
	stuck, err := rewardsclient.ListStuckOutboxes(s.ctx, s.temporal, now.Add(-*older), *limit)
	if err != nil {
		return err
	}
	if *g.asJSON {
		if stuck == nil {
			stuck = []rewardsclient.StuckOutbox{}
		}
		return print(out, true, stuck, "")
	}
	if len(stuck) == 0 {
		return print(out, false, nil, fmt.Sprintf("no outbox has been stuck for %s or more", *older))
	}
	for _, e := range stuck {
		if _, err := fmt.Fprintln(out, stuckLine(e, now)); err != nil {
			return err
		}
	}
	return nil
}

// stuckLine is one stuck outbox in one line.
func stuckLine(e rewardsclient.StuckOutbox, now time.Time) string {
	age := now.Sub(e.Since).Round(time.Second)
	if e.Status == nil {
		return fmt.Sprintf("%s: stuck since %s (%s); status unknown: %s", e.WorkflowID, e.Since.Format(time.RFC3339), age, e.Error)
	}
	name := e.Status.CustomerID
	if !tenant.IsDefault(e.Status.TenantID) {
		name = e.Status.TenantID + "/" + name
	}
	return fmt.Sprintf("%s (%s): %d changes in the outbox, oldest from %s (%s), feed_seq %d, release %d",
		name, e.WorkflowID, e.Status.OutboxLen, e.Since.Format(time.RFC3339), age, e.Status.FeedSeq, e.Status.Release)
}

// feedDiscardCommand discards the head of one customer's outbox, on
// purpose: the changes go into -out (a JSON file of the discard's record
// and every change), and the entity keeps the record in its status.
func feedDiscardCommand(ctx context.Context, fs *flag.FlagSet, g globals, args []string, out io.Writer) error {
	who := addCustomerFlags(fs)
	reason := fs.String("reason", "", "why the changes are given up (required; kept in the entity's record)")
	through := fs.Int64("through-seq", 0, "discard the changes up to and including this `seq` (default: all in the outbox)")
	file := fs.String("out", "", "write the record and every discarded change to this JSON `file` (required; - for stdout)")
	if err := parseFlags(fs, "feed discard", args); err != nil {
		return err
	}
	switch {
	case strings.TrimSpace(*reason) == "":
		return errors.New("-reason is required: it is kept with the record of the discard")
	case *file == "":
		return errors.New("-out is required: the discarded changes are written there, so that nothing is lost unseen")
	case *through < 0:
		return errors.New("-through-seq must not be negative")
	}
	// Fail on an unwritable file before anything is discarded.
	w := io.Writer(out)
	if *file != "-" {
		f, err := os.OpenFile(*file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("-out: %w", err)
		}
		defer f.Close()
		w = f
	}
	s, err := g.rewardsSession(ctx, who)
	if err != nil {
		return err
	}
	defer s.Close()
	res, err := s.rewards.DiscardOutbox(s.ctx, s.customer, rewards.DiscardOutbox{Reason: *reason, ThroughSeq: *through})
	if err != nil {
		if *file != "-" {
			_ = os.Remove(*file)
		}
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(struct {
		WorkflowID string `json:"workflow_id"`
		rewards.DiscardResult
	}{rewards.RewardsWorkflowIDFor(s.rewards.Tenant, s.customer), res}); err != nil {
		return fmt.Errorf("writing the discarded changes: %w", err)
	}
	if *file == "-" {
		return nil
	}
	r := res.Record
	return print(out, *g.asJSON, r, fmt.Sprintf("discarded %d changes of %s (seq %d to %d) at %s; written to %s",
		r.Count, s.customerName(), r.FirstSeq, r.LastSeq, r.At.Format(time.RFC3339), *file))
}
