package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/entityflow/entityflow/internal/service/rollout"
)

// deployUsage lists the deploy subcommands.
const deployUsage = "usage: starter deploy status|nudge|set-current|ramp [flags]"

// deployRequest is a parsed deploy command line.
type deployRequest struct {
	// sub is the subcommand: status, nudge, set-current or ramp.
	sub        string
	deployment string
	// buildID is set-current's or ramp's version.
	buildID string
	// percent is ramp's share of the new entities, in (0, 100].
	percent float32
	// nudge is nudge's options (Deployment included).
	nudge rollout.NudgeOptions
}

// parseDeploy parses `deploy <subcommand> [flags]` into fs, which already
// holds the global flags, and checks the names it was given, so that bad
// input fails before any connection. The default -timeout is raised for the
// subcommands that wait: set-current and ramp for the version's workers to
// poll, nudge for a sweep over every entity at its pace.
func parseDeploy(fs *flag.FlagSet, args []string) (deployRequest, error) {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return deployRequest{}, errors.New(deployUsage)
	}
	req := deployRequest{sub: args[0]}
	fs.Init("starter deploy "+req.sub, flag.ContinueOnError)
	fs.StringVar(&req.deployment, "deployment", rollout.DefaultDeployment, "Worker Deployment `name`")
	var percent float64   // ramp's -percent
	var pace *pacingFlags // nudge's pacing flags
	var slice string      // nudge's -slice
	switch req.sub {
	case "status":
	case "set-current":
		fs.StringVar(&req.buildID, "build-id", "", "build `id` of the version to make current (required)")
		setDefault(fs, "timeout", 10*time.Minute)
	case "ramp":
		fs.StringVar(&req.buildID, "build-id", "", "build `id` of the version to ramp (required)")
		fs.Float64Var(&percent, "percent", 0, "`percentage` of the new entities to start on the version instead of the current one, more than 0 and at most 100 (required; at 100 every new entity starts on it while the current version stays current)")
		setDefault(fs, "timeout", 10*time.Minute)
	case "nudge":
		pace = addPacingFlags(fs, "signals", true)
		fs.StringVar(&slice, "slice", "", "nudge only slice `k/n` of the entities (1 <= k <= n, by a hash of the workflow ID): run n sweepers, one per k, to cover every entity once")
		fs.IntVar(&req.nudge.Max, "max", 0, "nudge at most this many entities (0: all)")
		fs.BoolVar(&req.nudge.DryRun, "dry-run", false, "count the entities that would be nudged, signal none")
		setDefault(fs, "timeout", 24*time.Hour)
	default:
		return deployRequest{}, fmt.Errorf("unknown deploy command %q\n%s", req.sub, deployUsage)
	}
	if err := parseFlags(fs, "deploy", args[1:]); err != nil {
		return deployRequest{}, err
	}
	if fs.NArg() > 0 {
		return deployRequest{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if pace != nil {
		var err error
		if req.nudge.Pacing, err = pace.config(); err != nil {
			return deployRequest{}, err
		}
		if req.nudge.Slice, err = rollout.ParseSlice(slice); err != nil {
			return deployRequest{}, fmt.Errorf("-%w", err)
		}
	}
	if err := req.check(percent, isSet(fs, "percent")); err != nil {
		return deployRequest{}, err
	}
	return req, nil
}

// check checks the names and numbers of a parsed request and completes it:
// percent is ramp's -percent as parsed, percentSet whether it was given.
func (r *deployRequest) check(percent float64, percentSet bool) error {
	if err := rollout.ValidateDeployment(r.deployment); err != nil {
		return err
	}
	switch r.sub {
	case "set-current":
		if r.buildID == "" {
			return errors.New("-build-id is required")
		}
		if err := rollout.ValidateBuildID(r.buildID); err != nil {
			return err
		}
	case "ramp":
		if r.buildID == "" {
			return errors.New("-build-id is required")
		}
		if err := rollout.ValidateBuildID(r.buildID); err != nil {
			return err
		}
		if !percentSet {
			return errors.New("-percent is required (more than 0, at most 100)")
		}
		r.percent = float32(percent)
		if percent == 0 {
			return fmt.Errorf("-percent 0: a ramp at 0%% sends no new entity to %s; to end a ramp, make its version current (starter deploy set-current -build-id %s) or remove the ramp (temporal worker deployment set-ramping-version --deployment-name %s --delete)", r.buildID, r.buildID, r.deployment)
		}
		if !(r.percent > 0 && r.percent <= 100) { // NaN too
			return fmt.Errorf("-percent %v: must be more than 0 and at most 100", percent)
		}
	case "nudge":
		if r.nudge.Max < 0 {
			return fmt.Errorf("-max %d: must be 0 (all) or more", r.nudge.Max)
		}
		r.nudge.Deployment = r.deployment
	}
	return nil
}

// isSet reports whether flag name was given on the command line.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// setDefault changes the default of flag name, as -h shows it too.
func setDefault(fs *flag.FlagSet, name string, v time.Duration) {
	f := fs.Lookup(name)
	f.DefValue = v.String()
	_ = f.Value.Set(f.DefValue) // a duration's own String parses
}

// deployCommand runs `starter deploy`: a versioned deploy of the workers from
// the operator's side (internal/service/rollout).
func deployCommand(ctx context.Context, fs *flag.FlagSet, g globals, args []string, out io.Writer) error {
	req, err := parseDeploy(fs, args)
	if err != nil {
		return err
	}
	s, err := g.dial(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	switch req.sub {
	case "status":
		r, err := rollout.Status(s.ctx, s.temporal, req.deployment)
		if err != nil {
			return err
		}
		return print(out, *g.asJSON, r, strings.TrimSuffix(r.Text(), "\n"))
	case "set-current":
		previous, err := rollout.SetCurrent(s.ctx, s.temporal, req.deployment, req.buildID)
		if err = stillPropagating(err); err != nil {
			return err
		}
		return print(out, *g.asJSON, setCurrentResult{req.deployment, req.buildID, previous}, setCurrentText(req.deployment, req.buildID, previous))
	case "ramp":
		previous, err := rollout.SetRamping(s.ctx, s.temporal, req.deployment, req.buildID, req.percent)
		if err = stillPropagating(err); err != nil {
			return err
		}
		return print(out, *g.asJSON, rampResult{req.deployment, req.buildID, req.percent, previous}, rampText(req.deployment, req.buildID, req.percent, previous))
	default: // nudge
		r, err := rollout.Nudge(s.ctx, s.temporal, req.nudge)
		if err != nil && r.Found == 0 {
			return err // the sweep never began
		}
		if perr := print(out, *g.asJSON, r, r.Text()); perr != nil && err == nil {
			err = perr
		}
		return err
	}
}

// stillPropagating lets a routing change that was made but has not reached
// every task queue yet pass as done, with a warning on stderr: the switch
// stands, and a later sweep reaches the entities it missed.
func stillPropagating(err error) error {
	if errors.Is(err, rollout.ErrStillPropagating) {
		fmt.Fprintln(os.Stderr, "starter: warning:", oneLine(err), "(run `starter deploy nudge` again later)")
		return nil
	}
	return err
}

// setCurrentResult is set-current's JSON answer.
type setCurrentResult struct {
	Deployment      string `json:"deployment"`
	CurrentBuildID  string `json:"current_build_id"`
	PreviousBuildID string `json:"previous_build_id"`
}

// setCurrentText is set-current's answer for a person.
func setCurrentText(deployment, buildID, previous string) string {
	if previous == buildID {
		return fmt.Sprintf("%s: %s was already the current version", deployment, buildID)
	}
	was := previous
	if was == "" {
		was = "none"
	}
	return fmt.Sprintf("%s: %s is now the current version (was %s); `starter deploy nudge` moves the idle entities onto it", deployment, buildID, was)
}

// rampResult is ramp's JSON answer.
type rampResult struct {
	Deployment             string  `json:"deployment"`
	RampingBuildID         string  `json:"ramping_build_id"`
	RampingPercentage      float32 `json:"ramping_percentage"`
	PreviousRampingBuildID string  `json:"previous_ramping_build_id"`
}

// rampText is ramp's answer for a person.
func rampText(deployment, buildID string, percent float32, previous string) string {
	if previous == buildID {
		return fmt.Sprintf("%s: %s was already the ramping version; it now takes %v%% of the new entities", deployment, buildID, percent)
	}
	was := previous
	if was == "" {
		was = "none"
	}
	return fmt.Sprintf("%s: %s is now the ramping version, taking %v%% of the new entities (was %s); running entities in that share move to it at their next ContinueAsNew, and `starter deploy set-current -build-id %s` ends the ramp", deployment, buildID, percent, was, buildID)
}
