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

	"github.com/entityflow/entityflow/internal/rollout"
)

// deployUsage lists the deploy subcommands.
const deployUsage = "usage: starter deploy status|nudge|set-current [flags]"

// deployRequest is a parsed deploy command line.
type deployRequest struct {
	// sub is the subcommand: status, nudge or set-current.
	sub        string
	deployment string
	// buildID is set-current's version.
	buildID string
	// nudge is nudge's options (Deployment included).
	nudge rollout.NudgeOptions
}

// parseDeploy parses `deploy <subcommand> [flags]` into fs, which already
// holds the global flags, and checks the names it was given, so that bad
// input fails before any connection. getenv supplies the default deployment
// name (WORKER_DEPLOYMENT_NAME). The default -timeout is raised for the
// subcommands that wait: set-current for the new version's workers to poll,
// nudge for a sweep over every entity at its pace.
func parseDeploy(fs *flag.FlagSet, args []string, getenv func(string) string) (deployRequest, error) {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return deployRequest{}, errors.New(deployUsage)
	}
	req := deployRequest{sub: args[0]}
	fs.Init("starter deploy "+req.sub, flag.ContinueOnError)
	defaultDeployment := getenv(rollout.DeploymentEnv)
	if defaultDeployment == "" {
		defaultDeployment = rollout.DefaultDeployment
	}
	fs.StringVar(&req.deployment, "deployment", defaultDeployment, "Worker Deployment `name` (env "+rollout.DeploymentEnv+")")
	switch req.sub {
	case "status":
	case "set-current":
		fs.StringVar(&req.buildID, "build-id", "", "build `id` of the version to make current (required)")
		setDefault(fs, "timeout", 10*time.Minute)
	case "nudge":
		fs.Float64Var(&req.nudge.Rate, "rate", rollout.DefaultNudgeRate, "signals per second")
		fs.IntVar(&req.nudge.Max, "max", 0, "nudge at most this many entities (0: all)")
		fs.BoolVar(&req.nudge.DryRun, "dry-run", false, "count the entities that would be nudged, signal none")
		setDefault(fs, "timeout", 24*time.Hour)
	default:
		return deployRequest{}, fmt.Errorf("unknown deploy command %q\n%s", req.sub, deployUsage)
	}
	if err := fs.Parse(args[1:]); err != nil {
		return deployRequest{}, err
	}
	if fs.NArg() > 0 {
		return deployRequest{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := rollout.ValidateDeployment(req.deployment); err != nil {
		return deployRequest{}, err
	}
	switch req.sub {
	case "set-current":
		if req.buildID == "" {
			return deployRequest{}, errors.New("-build-id is required")
		}
		if err := rollout.ValidateBuildID(req.buildID); err != nil {
			return deployRequest{}, err
		}
	case "nudge":
		if req.nudge.Rate <= 0 {
			return deployRequest{}, fmt.Errorf("-rate %v: must be positive", req.nudge.Rate)
		}
		if req.nudge.Max < 0 {
			return deployRequest{}, fmt.Errorf("-max %d: must be 0 (all) or more", req.nudge.Max)
		}
		req.nudge.Deployment = req.deployment
	}
	return req, nil
}

// setDefault changes the default of flag name, as -h shows it too.
func setDefault(fs *flag.FlagSet, name string, v time.Duration) {
	f := fs.Lookup(name)
	f.DefValue = v.String()
	_ = f.Value.Set(f.DefValue) // a duration's own String parses
}

// deployCommand runs `starter deploy`: a versioned deploy of the workers from
// the operator's side (internal/rollout).
func deployCommand(ctx context.Context, fs *flag.FlagSet, g globals, args []string, out io.Writer) error {
	req, err := parseDeploy(fs, args, os.Getenv)
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
		if err != nil {
			return err
		}
		return print(out, *g.asJSON, setCurrentResult{req.deployment, req.buildID, previous}, setCurrentText(req.deployment, req.buildID, previous))
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
