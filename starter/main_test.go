package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/entityflow/entityflow/internal/service/platform"
	"github.com/entityflow/entityflow/store"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// unreachable is an address where no Temporal server listens: a command that
// got as far as dialing would fail with "cannot reach Temporal".
const unreachable = "127.0.0.1:1"

// runStarter runs the command line args and returns what it printed on out,
// what it printed on stderr (flag usage, the bare usage) and its error.
func runStarter(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	f, ferr := os.CreateTemp(t.TempDir(), "stderr")
	if ferr != nil {
		t.Fatal(ferr)
	}
	saved := os.Stderr
	os.Stderr = f
	var out bytes.Buffer
	err = run(context.Background(), args, &out)
	os.Stderr = saved
	if _, ferr := f.Seek(0, io.SeekStart); ferr != nil {
		t.Fatal(ferr)
	}
	b, ferr := io.ReadAll(f)
	if ferr != nil {
		t.Fatal(ferr)
	}
	f.Close()
	return out.String(), string(b), err
}

func TestNoCommandPrintsUsage(t *testing.T) {
	stdout, stderr, err := runStarter(t)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v, want flag.ErrHelp (exit 2)", err)
	}
	if stdout != "" || stderr != usage+"\n" {
		t.Fatalf("stdout %q, stderr %q; want the usage on stderr", stdout, stderr)
	}
}

func TestHelpPrintsUsage(t *testing.T) {
	for _, arg := range []string{"help", "-h", "-help", "--help"} {
		stdout, _, err := runStarter(t, arg)
		if err != nil || stdout != usage+"\n" {
			t.Errorf("starter %s: %v, %q; want the usage on stdout", arg, err, stdout)
		}
	}
}

func TestUnknownCommand(t *testing.T) {
	_, _, err := runStarter(t, "frobnicate")
	if err == nil || !strings.HasPrefix(err.Error(), `unknown command "frobnicate"`+"\n"+usage) {
		t.Fatalf("err = %v, want unknown command and the usage", err)
	}
	_, _, err = runStarter(t, "schedules", "list")
	if err == nil || err.Error() != "usage: starter schedules sync" {
		t.Fatalf("schedules list: %v", err)
	}
}

// Bad flags and bad input fail before any connection: none of these reaches
// the dial (the address is unreachable, and the error is not that one).
func TestInputErrorsFailBeforeConnecting(t *testing.T) {
	dir := t.TempDir()
	invalid := filepath.Join(dir, "invalid.json")
	if err := os.WriteFile(invalid, []byte(`{"activity_id": "not-a-uuid"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.json")
	cases := []struct {
		args []string
		want string // the error's text; empty: any error but the dial's
	}{
		{[]string{"points", "-bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"points", "-points", "x"}, `invalid value "x" for flag -points: parse error`},
		{[]string{"points", "-points", "5"}, "-customer is required"},
		{[]string{"points", "-customer", "c 1", "-points", "5"}, `customer_id "c 1": only letters, digits and -_.:@ are allowed`},
		{[]string{"points", "-customer", "c-1", "-points", "5", "-at", "yesterday"}, `-at "yesterday" is not an RFC 3339 time such as 2026-11-21T10:00:00Z`},
		{[]string{"points", "-customer", "c-1"}, ""}, // zero points
		{[]string{"status"}, "-customer is required"},
		{[]string{"status", "-timeout", "soon"}, `invalid value "soon" for flag -timeout: parse error`},
		{[]string{"unenroll", "-customer", ""}, "-customer is required"},
		{[]string{"enroll", "-customer", strings.Repeat("c", 129)}, "customer_id must be at most 128 bytes"},
		{[]string{"status", "-customer", "c-1", "-tenant", "t/1"}, `-tenant: tenant ID "t/1": '/' at offset 1 is not allowed: must match ^[A-Za-z0-9][A-Za-z0-9._-]*$`},
		{[]string{"points", "-customer", "c-1", "-points", "5", "-tenant", "-t"}, `-tenant: tenant ID "-t": '-' at offset 0 is not allowed: must match ^[A-Za-z0-9][A-Za-z0-9._-]*$`},
		{[]string{"run"}, "-activity is required"},
		{[]string{"define"}, "-f is required (a file, or - for stdin)"},
		{[]string{"event", "-f", missing}, "open " + missing + ": no such file or directory"},
		{[]string{"define", "-f", invalid}, ""},
		{[]string{"serve", "-idempotency-ttl", "0s"}, "-idempotency-ttl (or IDEMPOTENCY_TTL) and -idempotency-lock-ttl (or IDEMPOTENCY_LOCK_TTL) must be positive"},
		{[]string{"serve", "-entity-batch-after", "-1"}, "-entity-batch-after (or ENTITY_BATCH_AFTER) -1: want 0 to -entity-max-inflight (or ENTITY_MAX_INFLIGHT) (8)"},
		{[]string{"serve", "-entity-max-inflight", "2", "-entity-batch-after", "3"}, "-entity-batch-after (or ENTITY_BATCH_AFTER) 3: want 0 to -entity-max-inflight (or ENTITY_MAX_INFLIGHT) (2)"},
	}
	for _, c := range cases {
		args := append([]string{c.args[0], "-address", unreachable}, c.args[1:]...)
		start := time.Now()
		stdout, _, err := runStarter(t, args...)
		switch {
		case err == nil:
			t.Errorf("%v: no error", c.args)
		case strings.Contains(err.Error(), "cannot reach Temporal"):
			t.Errorf("%v: %v; want it to fail before connecting", c.args, err)
		case c.want != "" && err.Error() != c.want:
			t.Errorf("%v: %q, want %q", c.args, err, c.want)
		case stdout != "":
			t.Errorf("%v: printed %q", c.args, stdout)
		case time.Since(start) > 2*time.Second:
			t.Errorf("%v: took %v", c.args, time.Since(start))
		}
	}
	_, _, err := runStarter(t, "schedules", "sync", "-address", unreachable, "-database-urlx", "x")
	if err == nil || err.Error() != "flag provided but not defined: -database-urlx" {
		t.Errorf("schedules sync -database-urlx: %v", err)
	}
	for _, c := range []struct {
		flags []string
		want  string
	}{
		{[]string{"-rate", "0"}, "-rate 0: must be a positive number"},
		{[]string{"-rate", "5", "-min-rate", "6"}, "-min-rate 6 is above -rate 5"},
		{[]string{"-concurrency", "0"}, "-concurrency 0: must be 1 or more"},
		{[]string{"-latency-target", "-1s"}, "-latency-target -1s: must be positive"},
		{[]string{"-backlog-target", "5"}, "flag provided but not defined: -backlog-target"},
	} {
		_, _, err := runStarter(t, append([]string{"schedules", "sync", "-address", unreachable}, c.flags...)...)
		if err == nil || err.Error() != c.want {
			t.Errorf("schedules sync %v: %v, want %q", c.flags, err, c.want)
		}
	}
}

// A command's -h prints its flags and exits 2, as flag.ErrHelp does in main.
func TestCommandHelp(t *testing.T) {
	_, stderr, err := runStarter(t, "points", "-h")
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v, want flag.ErrHelp", err)
	}
	for _, f := range []string{"-customer id", "-tenant tenant", "TENANT_ID", "-points", "-key key", "-signal", "-address host:port", "-json", "-timeout"} {
		if !strings.Contains(stderr, f) {
			t.Errorf("points -h does not list %s:\n%s", f, stderr)
		}
	}
}

// A command that gets as far as dialing an unreachable server fails in one
// line, after the dial's 5 s.
func TestUnreachableTemporal(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the dial's 5 s")
	}
	stdout, _, err := runStarter(t, "status", "-address", unreachable, "-customer", "c-1")
	if err == nil || err.Error() != "cannot reach Temporal at "+unreachable+" (is the server running?)" || stdout != "" {
		t.Fatalf("%v, %q", err, stdout)
	}
}

func TestStatusText(t *testing.T) {
	st := rewards.Status{CustomerID: "c-1", Points: 125, LifetimePoints: 300, Tier: "basic", EventCount: 7, Enrolled: true, DedupKeys: 7, Run: 3}
	const want = "c-1: 125 points (lifetime 300), tier basic, enrolled; 7 events, 7 dedup keys held, run 3"
	if got := statusText(st); got != want {
		t.Errorf("statusText = %q, want %q", got, want)
	}
	st.Enrolled = false
	if got := statusText(st); !strings.Contains(got, ", unenrolled;") {
		t.Errorf("statusText of an unenrolled customer = %q", got)
	}
	st.TenantID = "t-1"
	if got := statusText(st); !strings.HasPrefix(got, "t-1/c-1: ") {
		t.Errorf("statusText of another tenant's customer = %q, want it led by t-1/c-1", got)
	}
}

func TestOneLine(t *testing.T) {
	app := temporal.NewApplicationError("customer c-1 has unenrolled", rewards.ErrNotEnrolled)
	if got, want := oneLine(errors.Join(errors.New("update failed"), app)), "customer c-1 has unenrolled (NotEnrolled)"; got != want {
		t.Errorf("oneLine = %q, want %q", got, want)
	}
	if got := oneLine(errors.New("plain")); got != "plain" {
		t.Errorf("oneLine = %q", got)
	}
}

// fakeTemporal stands in for the Temporal client; it only counts Close.
type fakeTemporal struct {
	client.Client
	closed int
}

func (f *fakeTemporal) Close() { f.closed++ }

// Close releases everything a session holds: the database, the context and
// the Temporal client.
func TestSessionClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	tc := &fakeTemporal{}
	st, err := store.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "entity.db"))
	if err != nil {
		t.Fatal(err)
	}
	s := &session{ctx: ctx, temporal: tc, cancel: cancel, platform: &platform.Service{Store: st, Temporal: tc}}
	s.Close()
	if s.ctx.Err() == nil || tc.closed != 1 {
		t.Fatalf("after Close: context %v, Temporal closed %d times", s.ctx.Err(), tc.closed)
	}
	if err := st.Ping(context.Background()); err == nil {
		t.Fatal("the database is still open")
	}

	// A rewards session has no database.
	ctx, cancel = context.WithCancel(context.Background())
	tc = &fakeTemporal{}
	s = &session{ctx: ctx, temporal: tc, cancel: cancel, customer: "c-1"}
	s.Close()
	if s.ctx.Err() == nil || tc.closed != 1 {
		t.Fatalf("rewards session after Close: context %v, Temporal closed %d times", s.ctx.Err(), tc.closed)
	}
}

// Every command's -h names each environment variable it reads, its own and
// the global flags', beside the flag.
func TestHelpNamesTheEnvironment(t *testing.T) {
	commandLines := map[string][][]string{
		"points": {{"points"}}, "status": {{"status"}}, "enroll": {{"enroll"}}, "unenroll": {{"unenroll"}},
		"define": {{"define"}}, "event": {{"event"}}, "run": {{"run"}}, "schedules": {{"schedules", "sync"}},
		"apikey":           {{"apikey", "create"}, {"apikey", "revoke"}, {"apikey", "list"}},
		"deploy":           {{"deploy", "status"}, {"deploy", "set-current"}, {"deploy", "ramp"}, {"deploy", "nudge"}},
		"serve":            {{"serve"}},
		"deadletters list": {{"deadletters", "list"}}, "deadletters replay": {{"deadletters", "replay"}},
	}
	for command, vars := range environment {
		if command == "" {
			continue
		}
		lines, ok := commandLines[command]
		if !ok {
			t.Errorf("no command line to test the help of %s", command)
		}
		for _, line := range lines {
			_, stderr, err := runStarter(t, append(line, "-h")...)
			if !errors.Is(err, flag.ErrHelp) {
				t.Fatalf("%v -h: err %v, want flag.ErrHelp", line, err)
			}
			for _, table := range []map[string]string{environment[""], vars} {
				for name, env := range table {
					if !strings.Contains(stderr, "-"+name) || !strings.Contains(stderr, "(env "+env+")") {
						t.Errorf("%v -h does not name -%s with %s:\n%s", line, name, env, stderr)
					}
				}
			}
		}
	}
}
