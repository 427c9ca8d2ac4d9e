package main

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func TestParseDeadLetters(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		env     map[string]string
		args    []string
		wantErr string
		check   func(t *testing.T, r deadLettersRequest)
	}{
		{name: "no subcommand", args: nil, wantErr: deadLettersUsage},
		{name: "an unknown subcommand", args: []string{"purge"}, wantErr: `unknown deadletters command "purge"`},
		{name: "list with the defaults", args: []string{"list"}, check: func(t *testing.T, r deadLettersRequest) {
			if r.natsURL != "nats://127.0.0.1:4222" || r.bus.Stream != "INGEST_DEAD_LETTERS" || r.bus.Prefix != "ingest.dead" {
				t.Errorf("%+v", r)
			}
		}},
		{name: "list with every filter", args: []string{"list", "-reason", "not-enrolled,unknown-tenant", "-subject", "rewards.*.c-1.points", "-since", "2h"},
			check: func(t *testing.T, r deadLettersRequest) {
				if len(r.filter.Reasons) != 2 || r.filter.Subject != "rewards.*.c-1.points" || !r.filter.Since.Equal(now.Add(-2*time.Hour)) {
					t.Errorf("%+v", r.filter)
				}
			}},
		{name: "the environment of the bus and the stream", env: map[string]string{"NATS_URL": "nats://bus:4222", "INGEST_DEAD_LETTER_STREAM": "DEAD"},
			args: []string{"list", "-ingest-dead-letter-stream", "DEAD2"}, check: func(t *testing.T, r deadLettersRequest) {
				if r.natsURL != "nats://bus:4222" || r.bus.Stream != "DEAD2" {
					t.Errorf("url %s, stream %s; want the variable's url, the flag's stream", r.natsURL, r.bus.Stream)
				}
			}},
		{name: "a bad reason", args: []string{"list", "-reason", "lost"}, wantErr: `-reason "lost"`},
		{name: "a bad since", args: []string{"list", "-since", "last week"}, wantErr: `-since "last week"`},
		{name: "a bad subject", args: []string{"replay", "-subject", "a.>.b"}, wantErr: `-subject "a.>.b"`},
		{name: "replay's flags", args: []string{"replay", "-dry-run", "-wait", "5s", "-purge", "-ingest-points-durable", "p"},
			check: func(t *testing.T, r deadLettersRequest) {
				if !r.replay.DryRun || r.replay.Wait != 5*time.Second || !r.replay.Purge || r.bus.PointsDurable != "p" || r.bus.EventsDurable != "ingest-events" {
					t.Errorf("%+v %+v", r.replay, r.bus)
				}
			}},
		{name: "replay's flags are not list's", args: []string{"list", "-dry-run"}, wantErr: "flag provided but not defined"},
		{name: "no wait", args: []string{"replay", "-wait", "0s"}, wantErr: "-wait must be more than 0"},
		{name: "a user without a password", args: []string{"list", "-nats-user", "u"}, wantErr: "needs both -nats-user and -nats-password"},
		{name: "arguments left", args: []string{"list", "extra"}, wantErr: "unexpected arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, v := range []string{"NATS_URL", "INGEST_DEAD_LETTER_STREAM", "INGEST_DEAD_LETTER_PREFIX", "NATS_USER", "NATS_PASSWORD"} {
				t.Setenv(v, tc.env[v])
			}
			fs := flag.NewFlagSet("starter deadletters", flag.ContinueOnError)
			fs.SetOutput(new(strings.Builder))
			globalFlags(fs)
			r, err := parseDeadLetters(fs, tc.args, now)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, r)
		})
	}
}
