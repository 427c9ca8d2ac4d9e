// Command starter serves the HTTP API and is the project's command line for
// people and scripts:
//
//	starter serve    [-http-addr 127.0.0.1:8080] [-idempotency-store memory|redis://...|sql]
//	starter points   -customer c-1 [-tenant T] -points 25 [-key k-1] [-activity purchase] [-source order-9] [-at RFC3339] [-signal]
//	starter status   -customer c-1 [-tenant T]
//	starter unenroll -customer c-1 [-tenant T]
//	starter enroll   -customer c-1 [-tenant T]
//	starter define   -f definition.json        (or - for stdin)
//	starter event    -f envelope.json          (or - for stdin)
//	starter run      -activity ID [-key K]
//	starter schedules sync
//	starter deploy status      [-deployment entityflow]
//	starter deploy set-current -build-id B [-deployment entityflow]
//	starter deploy ramp        -build-id B -percent P [-deployment entityflow]
//	starter deploy nudge       [-deployment entityflow] [-rate 20] [-max 0] [-dry-run]
//	starter apikey create -tenant T -scopes rewards:write,rewards:read [-name N]
//	starter apikey revoke -id ID
//	starter apikey list   [-tenant T]
//	starter deadletters list   [-reason R,...] [-subject S] [-since 2h|RFC3339] [-nats-url U]
//	starter deadletters replay [-reason R,...] [-subject S] [-since T] [-dry-run] [-wait 30s] [-purge]
//	starter feed stuck   [-older 5m] [-limit 100]
//	starter feed discard -customer c-1 [-tenant T] -reason R [-through-seq N] -out discarded.json
//
// Every command takes -json for machine-readable output, and -address and
// -namespace (or TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE). The rewards commands
// address a customer of one tenant: -tenant (or TENANT_ID), by default the
// default tenant. Errors are one line on stderr with a non-zero exit.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/entityflow/entityflow/internal/infra/temporalclient"
	"github.com/entityflow/entityflow/internal/service/platform"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/tenant"
	"github.com/entityflow/entityflow/workflows/rewards"
)

const usage = `usage: starter <command> [flags]

commands:
  serve      run the HTTP API (HTTP_ADDR, default 127.0.0.1:8080)
  points     apply a point event to a customer (creates the customer on first use)
  status     print a customer's status
  unenroll   end a customer's rewards entity (final until enroll)
  enroll     enroll a customer, or re-enroll one who unenrolled
  define     create or replace an activity definition (and its Schedule when cron-triggered)
  event      deliver an event envelope: start the runs of every subscribed activity
  run        start a run of an activity by hand
  schedules sync   make the Temporal Schedules match the stored cron definitions
  deploy status    a Worker Deployment's versions and the entities on each
  deploy set-current   make a version current once its workers poll
  deploy ramp      start a share of the new entities on a version once its workers poll
  deploy nudge     wake the entities not on the current version so they move onto it
  apikey create    create an API key of the HTTP API for a tenant and scopes (shown once)
  apikey revoke    revoke an API key
  apikey list      list the API keys (never their secrets)
  deadletters list     list the ingress's dead letters (NATS_URL), filtered by reason, subject, time
  deadletters replay   republish dead letters under their dedup keys once the cause is fixed; report applied, duplicate, still failing
  feed stuck       list the entities whose change feed outbox is not draining, with its length and age
  feed discard     give up on one customer's unpublished changes, on purpose; they are written to a file and recorded

run "starter <command> -h" for a command's flags`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "starter:", oneLine(err))
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, usage)
		return flag.ErrHelp
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("starter "+cmd, flag.ContinueOnError)
	g := globalFlags(fs)
	switch cmd {
	case "points":
		return pointsCommand(ctx, fs, g, args, out)
	case "status":
		return statusCommand(ctx, fs, g, args, out)
	case "unenroll":
		return unenrollCommand(ctx, fs, g, args, out)
	case "enroll":
		return enrollCommand(ctx, fs, g, args, out)
	case "serve":
		return serveCommand(ctx, fs, g, args, out)
	case "define":
		return defineCommand(ctx, fs, g, args, out)
	case "event":
		return eventCommand(ctx, fs, g, args, out)
	case "run":
		return runCommand(ctx, fs, g, args, out)
	case "schedules":
		if len(args) == 0 || args[0] != "sync" {
			return errors.New("usage: starter schedules sync")
		}
		return schedulesSyncCommand(ctx, fs, g, args[1:], out)
	case "deploy":
		return deployCommand(ctx, fs, g, args, out)
	case "apikey":
		return apikeyCommand(ctx, fs, g, args, out)
	case "deadletters":
		return deadLettersCommand(ctx, fs, g, args, out)
	case "feed":
		return feedCommand(ctx, fs, g, args, out)
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(out, usage)
		return nil
	default:
		return fmt.Errorf("unknown command %q\n%s", cmd, usage)
	}
}

// globals are the flags every command takes.
type globals struct {
	address, namespace *string
	asJSON             *bool
	timeout            *time.Duration
}

func globalFlags(fs *flag.FlagSet) globals {
	return globals{
		address:   fs.String("address", "", "Temporal `host:port` (default "+temporalclient.DefaultAddress+")"),
		namespace: fs.String("namespace", "", "Temporal `namespace` (default default)"),
		asJSON:    fs.Bool("json", false, "print JSON"),
		timeout:   fs.Duration("timeout", time.Minute, "give up after this long, retries included"),
	}
}

// session is what one command holds while it runs: its context, bounded by
// -timeout, the Temporal client, and what the command works through, the
// rewards client (with the customer it is for) or the platform service (with
// its database). Close releases all of it.
type session struct {
	ctx      context.Context
	temporal client.Client
	// dataConverter is the client's (payload encryption when configured).
	dataConverter converter.DataConverter
	// rewards and customer are set for the rewards commands (rewardsSession).
	rewards  *rewardsclient.Client
	customer string
	// platform is set for the platform commands (platformSession); its Store
	// is open.
	platform *platform.Service

	cancel context.CancelFunc
}

// Close closes the database, if the session opened one, ends the context and
// closes the Temporal client.
func (s *session) Close() {
	if s.platform != nil {
		s.platform.Store.Close()
	}
	s.cancel()
	s.temporal.Close()
}

// dial connects to Temporal (an unreachable server is an error, not a wait)
// and bounds the command by -timeout: a session with neither rewards client
// nor platform service yet, for rewardsSession and platformSession.
func (g globals) dial(ctx context.Context) (*session, error) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	opts, err := temporalclient.Options(*g.address, *g.namespace, logger)
	if err != nil {
		return nil, err
	}
	dctx, cancelDial := context.WithTimeout(ctx, 5*time.Second)
	defer cancelDial()
	c, err := temporalclient.Dial(dctx, opts, logger)
	if err != nil {
		return nil, fmt.Errorf("cannot reach Temporal at %s (is the server running?)", opts.HostPort)
	}
	ctx, cancel := context.WithTimeout(ctx, *g.timeout)
	return &session{ctx: ctx, temporal: c, dataConverter: opts.DataConverter, cancel: cancel}, nil
}

// rewardsSession checks the customer ID and its tenant and connects to
// Temporal for a rewards command.
func (g globals) rewardsSession(ctx context.Context, who customerFlags) (*session, error) {
	customer, tenantID := *who.customer, tenant.Normalize(*who.tenant)
	if customer == "" {
		return nil, errors.New("-customer is required")
	}
	if err := rewards.ValidateCustomerID(customer); err != nil {
		return nil, err
	}
	if err := tenant.Validate(tenantID); err != nil {
		return nil, fmt.Errorf("-tenant: %w", err)
	}
	s, err := g.dial(ctx)
	if err != nil {
		return nil, err
	}
	s.rewards = &rewardsclient.Client{Temporal: s.temporal, Tenant: tenantID}
	s.customer = customer
	return s, nil
}

// customerFlags are the flags that name a rewards command's customer.
type customerFlags struct {
	customer, tenant *string
}

// addCustomerFlags adds -customer and -tenant, the flags of the rewards
// commands.
func addCustomerFlags(fs *flag.FlagSet) customerFlags {
	return customerFlags{
		customer: fs.String("customer", "", "customer `id` (required)"),
		tenant: fs.String("tenant", "", "the customer's `tenant` (default "+tenant.Default+
			"); the same customer ID in another tenant is another customer"),
	}
}

func pointsCommand(ctx context.Context, fs *flag.FlagSet, g globals, args []string, out io.Writer) error {
	who := addCustomerFlags(fs)
	points := fs.Int64("points", 0, "points to award, or to redeem when negative (required, not zero)")
	key := fs.String("key", "", "dedup `key`; a retry with the same key applies once (default: a new UUID, printed)")
	activity := fs.String("activity", "manual", "activity `name`")
	source := fs.String("source", "", "source `id`, such as an order number")
	at := fs.String("at", "", "when it happened, RFC 3339 (optional; part of the event, so a retry must repeat it)")
	asSignal := fs.Bool("signal", false, "send as the add-points signal (fire and forget) instead of the apply-points update")
	if err := parseFlags(fs, "points", args); err != nil {
		return err
	}
	// No default time: a retry of the same command must describe the same event.
	ev := rewards.PointEvent{DedupKey: *key, Activity: *activity, Points: *points, SourceID: *source}
	if *at != "" {
		t, err := time.Parse(time.RFC3339, *at)
		if err != nil {
			return fmt.Errorf("-at %q is not an RFC 3339 time such as 2026-11-21T10:00:00Z", *at)
		}
		ev.OccurredAt = t.UTC()
	}
	if ev.DedupKey == "" {
		ev.DedupKey = uuid.NewString()
	}
	if err := ev.Validate(); err != nil {
		return err
	}
	s, err := g.rewardsSession(ctx, who)
	if err != nil {
		return err
	}
	defer s.Close()
	if *asSignal {
		if err := s.rewards.AddPoints(s.ctx, s.customer, ev); err != nil {
			return err
		}
		return print(out, *g.asJSON, map[string]any{"sent": true, "dedup_key": ev.DedupKey},
			fmt.Sprintf("sent %+d points to %s (dedup key %s)", ev.Points, s.customerName(), ev.DedupKey))
	}
	res, err := s.rewards.ApplyPoints(s.ctx, s.customer, ev)
	if err != nil {
		return err
	}
	verb := "applied"
	switch {
	case res.Duplicate:
		verb = "already handled (duplicate)"
	case !res.Applied:
		verb = "refused"
	}
	return print(out, *g.asJSON, struct {
		rewards.PointsResult
		DedupKey string `json:"dedup_key"`
	}{res, ev.DedupKey},
		fmt.Sprintf("%s %+d points: %s now has %d points, tier %s (dedup key %s)", verb, ev.Points, s.customerName(), res.Points, res.Tier, ev.DedupKey))
}

// customerCommand parses the flags of rewards command, which takes only
// -customer and -tenant, and connects for it.
func (g globals) customerCommand(ctx context.Context, fs *flag.FlagSet, command string, args []string) (*session, error) {
	who := addCustomerFlags(fs)
	if err := parseFlags(fs, command, args); err != nil {
		return nil, err
	}
	return g.rewardsSession(ctx, who)
}

// customerName names the session's customer in messages: its ID, led by its
// tenant unless that is the default tenant.
func (s *session) customerName() string {
	if tenant.IsDefault(s.rewards.Tenant) {
		return s.customer
	}
	return s.rewards.Tenant + "/" + s.customer
}

func statusCommand(ctx context.Context, fs *flag.FlagSet, g globals, args []string, out io.Writer) error {
	s, err := g.customerCommand(ctx, fs, "status", args)
	if err != nil {
		return err
	}
	defer s.Close()
	st, err := s.rewards.Status(s.ctx, s.customer)
	if err != nil {
		return err
	}
	return print(out, *g.asJSON, st, statusText(st))
}

// enrollCommand enrolls a customer: the explicit re-enrollment after an
// unenrollment (the entity starts again with no points), nothing for a
// customer who is enrolled.
func enrollCommand(ctx context.Context, fs *flag.FlagSet, g globals, args []string, out io.Writer) error {
	s, err := g.customerCommand(ctx, fs, "enroll", args)
	if err != nil {
		return err
	}
	defer s.Close()
	st, err := s.rewards.Enroll(s.ctx, s.customer)
	if err != nil {
		return err
	}
	return print(out, *g.asJSON, st, statusText(st))
}

// statusText is a customer's status in one line, the customer led by its
// tenant unless that is the default tenant.
func statusText(st rewards.Status) string {
	enrolled := "enrolled"
	if !st.Enrolled {
		enrolled = "unenrolled"
	}
	name := st.CustomerID
	if !tenant.IsDefault(st.TenantID) {
		name = st.TenantID + "/" + name
	}
	return fmt.Sprintf("%s: %d points (lifetime %d), tier %s, %s; %d events, %d dedup keys held, run %d",
		name, st.Points, st.LifetimePoints, st.Tier, enrolled, st.EventCount, st.DedupKeys, st.Run)
}

func unenrollCommand(ctx context.Context, fs *flag.FlagSet, g globals, args []string, out io.Writer) error {
	s, err := g.customerCommand(ctx, fs, "unenroll", args)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.rewards.Unenroll(s.ctx, s.customer); err != nil {
		return err
	}
	res := map[string]any{"customer_id": s.customer, "unenroll_sent": true}
	if !tenant.IsDefault(s.rewards.Tenant) {
		res["tenant_id"] = s.rewards.Tenant
	}
	return print(out, *g.asJSON, res, fmt.Sprintf("unenroll sent to %s", s.customerName()))
}

func print(out io.Writer, asJSON bool, v any, text string) error {
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	_, err := fmt.Fprintln(out, text)
	return err
}

// oneLine turns an error into one readable line: the workflow's own message for
// an application error, without the SDK's wrapping.
func oneLine(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return fmt.Sprintf("%s (%s)", appErr.Message(), appErr.Type())
	}
	return err.Error()
}
