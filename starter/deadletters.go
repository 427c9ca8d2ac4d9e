package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/entityflow/entityflow/internal/service/deadletters"
	"github.com/entityflow/entityflow/internal/service/ingress"
)

// deadLettersUsage lists the deadletters subcommands.
const deadLettersUsage = "usage: starter deadletters list|replay [flags]"

// deadLettersRequest is a parsed deadletters command line.
type deadLettersRequest struct {
	// sub is the subcommand: list or replay.
	sub     string
	natsURL string
	nats    ingress.Security
	bus     deadletters.Bus
	filter  deadletters.Filter
	replay  deadletters.ReplayOptions
}

// parseDeadLetters parses `deadletters <subcommand> [flags]` into fs, which
// already holds the global flags, and checks them, so that bad input fails
// before any connection. The flags of the bus and of the dead-letter stream
// are the worker's, with the same environment variables.
func parseDeadLetters(fs *flag.FlagSet, args []string, now time.Time) (deadLettersRequest, error) {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return deadLettersRequest{}, errors.New(deadLettersUsage)
	}
	req := deadLettersRequest{sub: args[0]}
	if req.sub != "list" && req.sub != "replay" {
		return deadLettersRequest{}, fmt.Errorf("unknown deadletters command %q\n%s", req.sub, deadLettersUsage)
	}
	fs.Init("starter deadletters "+req.sub, flag.ContinueOnError)
	req.nats.AddFlags(fs, &req.natsURL, "NATS server `url`s, comma-separated")
	fs.StringVar(&req.bus.Stream, "ingest-dead-letter-stream", ingress.DefaultDeadLetterStream, "JetStream `stream` of dead letters")
	fs.StringVar(&req.bus.Prefix, "ingest-dead-letter-prefix", ingress.DefaultDeadLetterPrefix, "subject `prefix` of dead letters: {prefix}.{original subject}")
	reasons := fs.String("reason", "", "only letters of these `reasons`, comma-separated: "+strings.Join(deadletters.Reasons, ", "))
	subject := fs.String("subject", "", "only letters whose original `subject` matches, with NATS's wildcards (* a token, > the rest)")
	since := fs.String("since", "", "only letters stored since this `time`: a duration back from now (2h) or an RFC 3339 time")
	if req.sub == "replay" {
		fs.StringVar(&req.bus.ReplayStream, "ingest-replay-stream", ingress.DefaultReplayStream, "JetStream `stream` replays are published to (the ingress's -ingest-replay-stream)")
		fs.StringVar(&req.bus.ReplayPrefix, "ingest-replay-prefix", ingress.DefaultReplayPrefix, "subject `prefix` of replays (the ingress's -ingest-replay-prefix)")
		fs.StringVar(&req.bus.PointsDurable, "ingest-points-durable", ingress.DefaultPointsDurable, "durable consumer `name` of point events of the ingress ({name}-{partition})")
		fs.StringVar(&req.bus.EventsDurable, "ingest-events-durable", ingress.DefaultEventsDurable, "durable consumer `name` of event envelopes of the ingress")
		fs.BoolVar(&req.replay.DryRun, "dry-run", false, "print what would be sent, send nothing")
		fs.DurationVar(&req.replay.Wait, "wait", 30*time.Second, "how long to watch for each letter's outcome; what is undecided then is pending")
		fs.BoolVar(&req.replay.Purge, "purge", false, "delete the letters whose replay was applied or a duplicate (never others)")
		setDefault(fs, "timeout", 10*time.Minute)
	}
	if err := parseFlags(fs, "deadletters "+req.sub, args[1:]); err != nil {
		return deadLettersRequest{}, err
	}
	if fs.NArg() > 0 {
		return deadLettersRequest{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if req.replay.Wait <= 0 && !req.replay.DryRun && req.sub == "replay" {
		return deadLettersRequest{}, fmt.Errorf("-wait must be more than 0, not %v", req.replay.Wait)
	}
	if err := req.nats.Validate(); err != nil {
		return deadLettersRequest{}, err
	}
	f, err := deadletters.ParseFilter(*reasons, *subject, *since, now)
	if err != nil {
		return deadLettersRequest{}, err
	}
	req.filter = f
	return req, nil
}

// deadLettersCommand lists dead letters, or replays them; a replay with a
// letter still failing or undecided is an error (exit status 1) after its
// report.
func deadLettersCommand(ctx context.Context, fs *flag.FlagSet, g globals, args []string, out io.Writer) error {
	req, err := parseDeadLetters(fs, args, time.Now())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *g.timeout)
	defer cancel()
	dctx, cancelDial := context.WithTimeout(ctx, 5*time.Second)
	defer cancelDial()
	nc, err := ingress.Connect(dctx, req.natsURL, "entityflow starter deadletters", req.nats, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return err
	}
	defer nc.Close()
	req.bus.JS, err = jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("JetStream: %w", err)
	}
	letters, err := req.bus.List(ctx, req.filter)
	if err != nil {
		return err
	}
	if req.sub == "list" {
		if *g.asJSON {
			return print(out, true, nonNil(letters), "")
		}
		for _, l := range letters {
			if _, err := fmt.Fprintln(out, letterLine(l)); err != nil {
				return err
			}
		}
		return nil
	}
	rep, err := req.bus.Replay(ctx, letters, req.replay)
	if err != nil {
		// Letters may have been sent already: say which before the error.
		if sent(rep) {
			if perr := printReplay(out, *g.asJSON, rep); perr != nil {
				return errors.Join(err, perr)
			}
			return fmt.Errorf("replay stopped after sending the letters the report shows with a sequence (their outcome is undecided where it shows none): %w", err)
		}
		return err
	}
	if err := printReplay(out, *g.asJSON, rep); err != nil {
		return err
	}
	if rep.Failed() {
		return fmt.Errorf("%d dead letters still failing, %d pending", rep.StillFailing, rep.Pending)
	}
	return nil
}

// sent reports whether a replay republished any letter (one with the
// sequence its stream stored it at).
func sent(rep deadletters.Report) bool {
	for _, r := range rep.Results {
		if r.Sequence != 0 {
			return true
		}
	}
	return false
}

// nonNil makes an empty list print as [] in JSON.
func nonNil(l []deadletters.Letter) []deadletters.Letter {
	if l == nil {
		return []deadletters.Letter{}
	}
	return l
}

// letterLine is a letter in one line: sequence, time, reason, original
// subject, dedup key, error.
func letterLine(l deadletters.Letter) string {
	return fmt.Sprintf("%d\t%s\t%s\t%s\tkey=%s\t%s", l.Sequence, l.Time.Format(time.RFC3339), l.Reason, l.Subject, orDash(l.DedupKey), l.Error)
}

// printReplay prints a replay's report: a line per letter and the totals.
func printReplay(out io.Writer, asJSON bool, rep deadletters.Report) error {
	if asJSON {
		return print(out, true, rep, "")
	}
	var b strings.Builder
	for _, r := range rep.Results {
		fmt.Fprintf(&b, "%d\t%s\t%s\tmsg-id=%s", r.Letter.Sequence, r.Outcome, r.Letter.Subject, r.MsgID)
		switch {
		case r.Outcome == deadletters.DryRun:
			keys := make([]string, 0, len(r.Message.Header))
			for k := range r.Message.Header {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				fmt.Fprintf(&b, "\t%s: %s", k, strings.Join(r.Message.Header[k], ", "))
			}
			fmt.Fprintf(&b, "\tbody %s", r.Message.Body)
		case r.Sequence != 0:
			fmt.Fprintf(&b, "\tstored %s:%d", r.Stream, r.Sequence)
		}
		if r.DeadLetter != 0 {
			fmt.Fprintf(&b, "\tdead letter %d: %s", r.DeadLetter, r.Error)
		}
		if r.Detail != "" {
			fmt.Fprintf(&b, "\t(%s)", r.Detail)
		}
		if r.Purged {
			b.WriteString("\tpurged")
		}
		b.WriteString("\n")
	}
	if rep.Dry > 0 {
		fmt.Fprintf(&b, "dry run: %d letters would be replayed, none sent\n", rep.Dry)
	} else {
		fmt.Fprintf(&b, "replayed %d: %d applied, %d duplicate, %d still failing, %d pending\n",
			len(rep.Results), rep.Applied, rep.Duplicate, rep.StillFailing, rep.Pending)
	}
	_, err := io.WriteString(out, b.String())
	return err
}
