package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/google/uuid"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/service/platform"
	"github.com/entityflow/entityflow/store"
)

// databaseUsage is the help of -database-url.
const databaseUsage = "database `url`: empty for the SQLite file ./data/entity.db, postgres://... for PostgreSQL"

// databaseFlag adds -database-url to the activity platform's commands.
func databaseFlag(fs *flag.FlagSet) *string {
	return fs.String("database-url", "", databaseUsage)
}

// platformSession connects to Temporal and opens the database for a
// platform command.
func (g globals) platformSession(ctx context.Context, databaseURL string) (*session, error) {
	s, err := g.dial(ctx)
	if err != nil {
		return nil, err
	}
	st, err := store.Open(s.ctx, databaseURL)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("opening database: %w", err)
	}
	s.platform = &platform.Service{Store: st, Temporal: s.temporal, DataConverter: s.dataConverter, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	return s, nil
}

// documentSession serves the commands that take a JSON document: it parses
// command's flags -f and -database-url, reads the document, hands it to
// parse, and only then opens a platform session, so bad input fails before
// any connection.
func (g globals) documentSession(ctx context.Context, fs *flag.FlagSet, command string, args []string, what string, parse func([]byte) error) (*session, error) {
	file := fs.String("f", "", what+" `file` (JSON; - for stdin)")
	dbURL := databaseFlag(fs)
	if err := parseFlags(fs, command, args); err != nil {
		return nil, err
	}
	doc, err := readDocument(*file)
	if err != nil {
		return nil, err
	}
	if err := parse(doc); err != nil {
		return nil, err
	}
	return g.platformSession(ctx, *dbURL)
}

// readDocument reads the JSON document named by -f: a file, or - for stdin.
func readDocument(path string) ([]byte, error) {
	switch path {
	case "":
		return nil, errors.New("-f is required (a file, or - for stdin)")
	case "-":
		return io.ReadAll(os.Stdin)
	default:
		return os.ReadFile(path)
	}
}

func defineCommand(ctx context.Context, fs *flag.FlagSet, g globals, args []string, out io.Writer) error {
	var def contracts.ActivityDefinition
	s, err := g.documentSession(ctx, fs, "define", args, "activity definition", func(doc []byte) (err error) {
		def, err = contracts.ParseActivityDefinition(doc)
		return err
	})
	if err != nil {
		return err
	}
	defer s.Close()
	res, err := s.platform.Define(s.ctx, def)
	if err != nil {
		return err
	}
	verb := "replaced"
	if res.Created {
		verb = "created"
	}
	text := fmt.Sprintf("%s activity %s (%s, %s trigger)", verb, def.ActivityID, def.Name, def.Trigger.Type)
	if res.Schedule != "" {
		schedVerb := "updated"
		if res.ScheduleCreated {
			schedVerb = "created"
		}
		text += fmt.Sprintf("; schedule %s %s", res.Schedule, schedVerb)
	}
	return print(out, *g.asJSON, res, text)
}

func eventCommand(ctx context.Context, fs *flag.FlagSet, g globals, args []string, out io.Writer) error {
	var env contracts.EventEnvelope
	s, err := g.documentSession(ctx, fs, "event", args, "event envelope", func(doc []byte) (err error) {
		env, err = contracts.ParseEventEnvelope(doc)
		return err
	})
	if err != nil {
		return err
	}
	defer s.Close()
	routed, err := s.platform.Deliver(s.ctx, env)
	if err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "event %s (%s, tenant %s): ", routed.EventID, env.EventType, env.TenantID)
	if len(routed.Runs) == 0 {
		b.WriteString("no activity subscribes to it; no runs started")
	}
	for i, r := range routed.Runs {
		if i > 0 {
			b.WriteString("; ")
		}
		state := "started"
		if r.Duplicate {
			state = "duplicate, already started"
		}
		fmt.Fprintf(&b, "%s %s (run %s)", r.WorkflowID, state, r.RunID)
	}
	return print(out, *g.asJSON, routed, b.String())
}

func runCommand(ctx context.Context, fs *flag.FlagSet, g globals, args []string, out io.Writer) error {
	activityID := fs.String("activity", "", "activity `id` (required)")
	key := fs.String("key", "", "idempotency `key`: the same key never starts two runs (default: a new UUID, printed)")
	dbURL := databaseFlag(fs)
	if err := parseFlags(fs, "run", args); err != nil {
		return err
	}
	if *activityID == "" {
		return errors.New("-activity is required")
	}
	if *key == "" {
		*key = uuid.NewString()
	}
	s, err := g.platformSession(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer s.Close()
	res, err := s.platform.StartManualRun(s.ctx, *activityID, *key)
	if err != nil {
		return err
	}
	state := "started"
	switch {
	case res.Duplicate && res.Status != "":
		state = "already ran with this key and ended " + string(res.Status) + "; it does not run again"
	case res.Duplicate:
		state = "already started with this key (duplicate)"
	}
	return print(out, *g.asJSON, res, fmt.Sprintf("run %s %s: workflow %s (key %s)", res.RunID, state, res.WorkflowID, *key))
}

func schedulesSyncCommand(ctx context.Context, fs *flag.FlagSet, g globals, args []string, out io.Writer) error {
	dbURL := databaseFlag(fs)
	pace := addPacingFlags(fs, "schedule calls", false)
	if err := parseFlags(fs, "schedules", args); err != nil {
		return err
	}
	cfg, err := pace.config()
	if err != nil {
		return err
	}
	s, err := g.platformSession(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer s.Close()
	rep, err := s.platform.SyncSchedules(s.ctx, cfg)
	if err != nil {
		return err
	}
	return print(out, *g.asJSON, rep, schedulesSyncText(rep))
}

// schedulesSyncText is schedules sync's answer for a person.
func schedulesSyncText(rep platform.SyncReport) string {
	text := fmt.Sprintf("schedules: %d created, %d updated, %d unchanged, %d deleted", len(rep.Created), len(rep.Updated), len(rep.Unchanged), len(rep.Deleted))
	if p := rep.Pacing; p.Calls > 0 {
		text += fmt.Sprintf("; %d calls in %.1f s at %.1f/s (rate %.3g to %.3g/s, %d in flight, backed off %d times)", p.Calls, p.Seconds, p.Rate, p.MinRate, p.MaxRate, p.Concurrency, p.Backoffs)
	}
	return text
}
