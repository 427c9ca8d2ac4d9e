package rollout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	deploymentpb "go.temporal.io/api/deployment/v1"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/entityflow/entityflow/internal/infra/pacing"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestQueries(t *testing.T) {
	const running = "WorkflowType = 'RewardsWorkflow' AND ExecutionStatus = 'Running'"
	for _, tc := range []struct {
		name, got, want string
	}{
		{"running", runningEntities, running},
		{"on a version", onVersionQuery("entityflow", "v1"), running + " AND TemporalWorkerDeploymentVersion = 'entityflow:v1'"},
		{"unversioned", unversionedQuery(), running + " AND TemporalWorkerDeploymentVersion IS NULL"},
		{"not on current", notOnCurrentQuery("entityflow", "v2", ""),
			running + " AND (TemporalWorkerDeploymentVersion IS NULL OR TemporalWorkerDeploymentVersion != 'entityflow:v2')"},
		{"not on current, none current", notOnCurrentQuery("entityflow", "", ""), running + " AND TemporalWorkerDeploymentVersion IS NOT NULL"},
		{"not on current nor ramping", notOnCurrentQuery("entityflow", "v2", "v3"),
			running + " AND (TemporalWorkerDeploymentVersion IS NULL OR (TemporalWorkerDeploymentVersion != 'entityflow:v2' AND TemporalWorkerDeploymentVersion != 'entityflow:v3'))"},
		{"none current, ramping from unversioned", notOnCurrentQuery("entityflow", "", "v1"),
			running + " AND TemporalWorkerDeploymentVersion IS NOT NULL AND TemporalWorkerDeploymentVersion != 'entityflow:v1'"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, tc.got, tc.want)
		}
	}
}

func TestCheckNames(t *testing.T) {
	for _, tc := range []struct {
		deployment, build string
		want              string // error text; empty: none
	}{
		{"entityflow", "v1", ""},
		{"entityflow", "2026-11-23.abc123_x", ""},
		{"", "v1", "deployment name is empty"},
		{"entityflow", "", "build ID is empty"},
		{"entity.flow", "v1", `deployment name "entity.flow": '.' and ':' are not allowed`},
		{"entity:flow", "v1", `deployment name "entity:flow": '.' and ':' are not allowed`},
		{"entityflow", "v1' OR 'x", `build ID "v1' OR 'x": quotes, backslashes and control characters are not allowed`},
		{`entity\flow`, "v1", `deployment name "entity\\flow": quotes, backslashes and control characters are not allowed`},
		{"entityflow", "v1\n", `build ID "v1\n": quotes, backslashes and control characters are not allowed`},
	} {
		err := checkNames(tc.deployment, tc.build)
		if got := fmt.Sprint(err); (err == nil) != (tc.want == "") || (err != nil && got != tc.want) {
			t.Errorf("checkNames(%q, %q) = %v, want %q", tc.deployment, tc.build, err, tc.want)
		}
	}
}

func TestReport(t *testing.T) {
	at := func(s string) *timestamppb.Timestamp {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return timestamppb.New(tm)
	}
	version := func(build string) *deploymentpb.WorkerDeploymentVersion {
		return &deploymentpb.WorkerDeploymentVersion{DeploymentName: "entityflow", BuildId: build}
	}
	desc := &workflowservice.DescribeWorkerDeploymentResponse{WorkerDeploymentInfo: &deploymentpb.WorkerDeploymentInfo{
		Name: "entityflow",
		RoutingConfig: &deploymentpb.RoutingConfig{
			CurrentDeploymentVersion: version("v3"),
			RampingDeploymentVersion: version("v4"), RampingVersionPercentage: 10,
		},
		RoutingConfigUpdateState: enums.ROUTING_CONFIG_UPDATE_STATE_IN_PROGRESS,
		VersionSummaries: []*deploymentpb.WorkerDeploymentInfo_WorkerDeploymentVersionSummary{
			{DeploymentVersion: version("v4"), Status: enums.WORKER_DEPLOYMENT_VERSION_STATUS_RAMPING, CreateTime: at("2026-11-23T12:00:00Z")},
			{DeploymentVersion: version("v3"), Status: enums.WORKER_DEPLOYMENT_VERSION_STATUS_CURRENT, CreateTime: at("2026-11-22T12:00:00Z")},
			{DeploymentVersion: version("v2"), Status: enums.WORKER_DEPLOYMENT_VERSION_STATUS_DRAINING, CreateTime: at("2026-11-21T12:00:00Z"),
				DrainageInfo: &deploymentpb.VersionDrainageInfo{Status: enums.VERSION_DRAINAGE_STATUS_DRAINING,
					LastChangedTime: at("2026-11-22T12:00:05Z"), LastCheckedTime: at("2026-11-23T11:59:00Z")}},
			{DeploymentVersion: version("v1"), Status: enums.WORKER_DEPLOYMENT_VERSION_STATUS_DRAINED, CreateTime: at("2026-11-20T12:00:00Z"),
				DrainageInfo: &deploymentpb.VersionDrainageInfo{Status: enums.VERSION_DRAINAGE_STATUS_DRAINED,
					LastChangedTime: at("2026-11-21T12:10:00Z"), LastCheckedTime: at("2026-11-21T12:10:00Z")}},
			{DeploymentVersion: version("v0"), Status: enums.WORKER_DEPLOYMENT_VERSION_STATUS_INACTIVE, CreateTime: at("2026-11-19T12:00:00Z")},
		},
	}}
	r := report("entityflow", desc)
	if r.CurrentBuildID != "v3" || r.RampingBuildID != "v4" || r.RampingPercentage != 10 || !r.RoutingPropagating {
		t.Errorf("routing: %+v", r)
	}
	var statuses []string
	for _, v := range r.Versions {
		statuses = append(statuses, v.BuildID+"="+v.Status)
	}
	if want := []string{"v4=ramping", "v3=current", "v2=draining", "v1=drained", "v0=inactive"}; !slices.Equal(statuses, want) {
		t.Errorf("versions %v, want %v", statuses, want)
	}
	if v := r.Versions[2]; v.DrainageCheckedAt == nil || !v.DrainageCheckedAt.Equal(at("2026-11-23T11:59:00Z").AsTime()) ||
		v.DrainageChangedAt == nil || !v.DrainageChangedAt.Equal(at("2026-11-22T12:00:05Z").AsTime()) {
		t.Errorf("v2 drainage times: %+v", v)
	}
	if v := r.Versions[0]; v.DrainageCheckedAt != nil || v.DrainageChangedAt != nil {
		t.Errorf("v4 has drainage times: %+v", v)
	}

	r.Versions[0].Entities, r.Versions[1].Entities, r.Versions[2].Entities = 2, 40, 3
	r.Running, r.Unversioned, r.NotOnCurrent = 50, 5, 10
	const want = `Worker Deployment entityflow: current version v3, ramping v4 at 10% (routing change still propagating)

BUILD ID       STATUS    ENTITIES  CREATED               DRAINAGE CHECKED
v4             ramping   2         2026-11-23T12:00:00Z  -
v3             current   40        2026-11-22T12:00:00Z  -
v2             draining  3         2026-11-21T12:00:00Z  2026-11-23T11:59:00Z
v1             drained   0         2026-11-20T12:00:00Z  2026-11-21T12:10:00Z
v0             inactive  0         2026-11-19T12:00:00Z  -
(unversioned)  -         5         -                     -

50 running entities, 10 not on the current version nor on the ramping one
`
	if got := r.Text(); got != want {
		t.Errorf("Text:\n%s\nwant\n%s", got, want)
	}

	// A deployment with no current version yet.
	empty := report("entityflow", &workflowservice.DescribeWorkerDeploymentResponse{WorkerDeploymentInfo: &deploymentpb.WorkerDeploymentInfo{}})
	if empty.Versions == nil || !strings.HasPrefix(empty.Text(), "Worker Deployment entityflow: current version none (unversioned)\n") {
		t.Errorf("no current version: %+v\n%s", empty, empty.Text())
	}
}

func TestNudgeReportText(t *testing.T) {
	for _, tc := range []struct {
		r    NudgeReport
		want string
	}{
		{NudgeReport{Deployment: "entityflow", CurrentBuildID: "v2", Found: 8, Nudged: 8},
			"nudged 8 of 8 entities not on the current version v2 of entityflow"},
		{NudgeReport{Deployment: "entityflow", CurrentBuildID: "v2", Found: 8, Nudged: 5, Gone: 2, Failed: 1, FirstError: "nudging c-1: boom"},
			"nudged 5 of 8 entities not on the current version v2 of entityflow; 2 had ended; 1 failed (first: nudging c-1: boom)"},
		{NudgeReport{Deployment: "entityflow", CurrentBuildID: "v2", Found: 3, Nudged: 3, MaxReached: true},
			"nudged 3 of 3 entities not on the current version v2 of entityflow; stopped at -max, more remain: run it again"},
		{NudgeReport{Deployment: "entityflow", CurrentBuildID: "v2", DryRun: true, Found: 4},
			"dry run: would nudge 4 entities not on the current version v2 of entityflow"},
		{NudgeReport{Deployment: "entityflow", Found: 1, Nudged: 1},
			"nudged 1 of 1 entities not on the current version none (unversioned) of entityflow"},
		{NudgeReport{Deployment: "entityflow", CurrentBuildID: "v2", RampingBuildID: "v3", Found: 2, Nudged: 2},
			"nudged 2 of 2 entities not on the current version v2 of entityflow nor on its ramping version v3"},
		{NudgeReport{Deployment: "entityflow", CurrentBuildID: "v2", RampingBuildID: "v3", DryRun: true, Found: 4},
			"dry run: would nudge 4 entities not on the current version v2 of entityflow nor on its ramping version v3"},
	} {
		if got := tc.r.Text(); got != tc.want {
			t.Errorf("Text of %+v:\n got %s\nwant %s", tc.r, got, tc.want)
		}
	}
}

// inOrder runs each call at once, in the caller's goroutine, and counts
// them: a pace with no concurrency, so a sweep's signals are in order.
type inOrder struct{ calls int }

func (p *inOrder) Go(ctx context.Context, call func(ctx context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.calls++
	_ = call(ctx) // the sweep counts the outcome itself
	return nil
}

func (p *inOrder) Wait() {}

func TestSweep(t *testing.T) {
	boom := errors.New("boom")
	gone := serviceerror.NewNotFound("workflow execution already completed")
	pages := [][]string{{"a", "b", "c"}, {"d", "e"}, {"f"}}
	for _, tc := range []struct {
		name      string
		opts      NudgeOptions
		signalErr map[string]error // per workflow ID; transient ones fail once
		listErrAt int              // page whose listing fails (1-based); 0: none
		// want
		signalled []string
		report    NudgeReport
		err       string
	}{
		{name: "all", signalled: []string{"a", "b", "c", "d", "e", "f"},
			report: NudgeReport{Found: 6, Nudged: 6}},
		{name: "max inside a page", opts: NudgeOptions{Max: 2}, signalled: []string{"a", "b"},
			report: NudgeReport{Found: 2, Nudged: 2, MaxReached: true}},
		{name: "max at a page's end", opts: NudgeOptions{Max: 3}, signalled: []string{"a", "b", "c"},
			report: NudgeReport{Found: 3, Nudged: 3, MaxReached: true}},
		{name: "max equal to all", opts: NudgeOptions{Max: 6}, signalled: []string{"a", "b", "c", "d", "e", "f"},
			report: NudgeReport{Found: 6, Nudged: 6}},
		{name: "max above all", opts: NudgeOptions{Max: 100}, signalled: []string{"a", "b", "c", "d", "e", "f"},
			report: NudgeReport{Found: 6, Nudged: 6}},
		{name: "dry run", opts: NudgeOptions{DryRun: true}, report: NudgeReport{Found: 6}},
		{name: "dry run with max", opts: NudgeOptions{DryRun: true, Max: 4}, report: NudgeReport{Found: 4, MaxReached: true}},
		{name: "ended meanwhile", signalErr: map[string]error{"b": gone, "e": gone},
			signalled: []string{"a", "b", "c", "d", "e", "f"}, report: NudgeReport{Found: 6, Nudged: 4, Gone: 2}},
		{name: "transient failure retried", signalErr: map[string]error{"c": serviceerror.NewUnavailable("down")},
			signalled: []string{"a", "b", "c", "c", "d", "e", "f"}, report: NudgeReport{Found: 6, Nudged: 6}},
		{name: "failures counted, the first reported", signalErr: map[string]error{"b": boom, "d": errors.New("bang")},
			signalled: []string{"a", "b", "c", "d", "e", "f"},
			report:    NudgeReport{Found: 6, Nudged: 4, Failed: 2, FirstError: "nudging b: boom"},
			err:       "2 of 6 nudges failed; first: nudging b: boom"},
		{name: "failure before max", opts: NudgeOptions{Max: 2}, signalErr: map[string]error{"a": boom},
			signalled: []string{"a", "b"},
			report:    NudgeReport{Found: 2, Nudged: 1, Failed: 1, FirstError: "nudging a: boom", MaxReached: true},
			err:       "1 of 2 nudges failed; first: nudging a: boom"},
		{name: "listing fails", listErrAt: 2, signalled: []string{"a", "b", "c"},
			report: NudgeReport{Found: 3, Nudged: 3}, err: "listing entities not on the current version: list down"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			list := func(_ context.Context, token []byte) ([]string, []byte, error) {
				page := 0
				if token != nil {
					fmt.Sscan(string(token), &page)
				}
				if page+1 == tc.listErrAt {
					return nil, nil, errors.New("list down")
				}
				var next []byte
				if page+1 < len(pages) {
					next = []byte(fmt.Sprint(page + 1))
				}
				return pages[page], next, nil
			}
			var signalled []string
			failedOnce := map[string]bool{}
			signal := func(_ context.Context, id string) error {
				signalled = append(signalled, id)
				err := tc.signalErr[id]
				if err != nil && errors.As(err, new(*serviceerror.Unavailable)) {
					if failedOnce[id] {
						return nil
					}
					failedOnce[id] = true
				}
				return err
			}
			var p *inOrder
			var sig func(context.Context, string) error
			if !tc.opts.DryRun {
				p, sig = &inOrder{}, signal
			}
			var r NudgeReport
			err := sweep(context.Background(), list, sig, paceOrNil(p), tc.opts, &r)
			if fmt.Sprint(err) != fmt.Sprint(errOrNil(tc.err)) {
				t.Errorf("err = %v, want %q", err, tc.err)
			}
			if r != tc.report {
				t.Errorf("report %+v, want %+v", r, tc.report)
			}
			if !slices.Equal(signalled, tc.signalled) {
				t.Errorf("signalled %v, want %v", signalled, tc.signalled)
			}
			// One paced call per entity, none in a dry run.
			if wantCalls := r.Nudged + r.Gone + r.Failed; p != nil && p.calls != wantCalls {
				t.Errorf("%d paced calls for %d signalled entities", p.calls, wantCalls)
			}
		})
	}
}

// paceOrNil keeps a nil *inOrder a nil pace.
func paceOrNil(p *inOrder) pace {
	if p == nil {
		return nil
	}
	return p
}

// errOrNil is nil for "" and an error with text s otherwise.
func errOrNil(s string) error {
	if s == "" {
		return nil
	}
	return errors.New(s)
}

// A sweep whose context ends while it waits for its pace stops there.
func TestSweepStopsWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	list := func(context.Context, []byte) ([]string, []byte, error) { return []string{"a", "b", "c"}, nil, nil }
	var signalled []string
	signal := func(_ context.Context, id string) error {
		signalled = append(signalled, id)
		cancel()
		return nil
	}
	var r NudgeReport
	err := sweep(ctx, list, signal, &inOrder{}, NudgeOptions{}, &r)
	if !errors.Is(err, context.Canceled) || !slices.Equal(signalled, []string{"a"}) || r.Nudged != 1 {
		t.Errorf("err %v, signalled %v, report %+v; want it to stop after a", err, signalled, r)
	}
}

// Nudge refuses bad options before it reaches the server (the nil client
// would panic).
func TestNudgeOptionErrors(t *testing.T) {
	for _, tc := range []struct {
		opts NudgeOptions
		want string
	}{
		{NudgeOptions{}, "deployment name is empty"},
		{NudgeOptions{Deployment: "entityflow", Pacing: pacing.Config{Max: -2}}, "rate -2: must be a positive number"},
		{NudgeOptions{Deployment: "entityflow", Pacing: pacing.Config{Max: 5, Min: 10}}, "minimum rate 10 is above the rate's ceiling 5"},
		{NudgeOptions{Deployment: "entityflow", Slice: Slice{K: 3, N: 2}}, "slice 3/2: want k/n with 1 <= k <= n"},
		{NudgeOptions{Deployment: "entityflow", Max: -1}, "max -1: must be 0 (all) or more"},
	} {
		if _, err := Nudge(context.Background(), nil, tc.opts); err == nil || err.Error() != tc.want {
			t.Errorf("Nudge(%+v): %v, want %q", tc.opts, err, tc.want)
		}
	}
}

// A wait that outlasts its context says what it was waiting for.
func TestRetryNamesTheLastFailure(t *testing.T) {
	// The context ends in the first wait (250 ms), or, on a slow machine,
	// during a try, which then returns its own failure.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := retry(ctx, notYetPolled, func(context.Context) (int, error) {
		return 0, serviceerror.NewNotFound("build ID 'v2' not found")
	})
	if err == nil || !strings.Contains(err.Error(), "build ID 'v2' not found") {
		t.Errorf("err = %v, want it to name the last failure", err)
	}
	if errors.Is(err, context.DeadlineExceeded) && !strings.HasSuffix(err.Error(), "(last: build ID 'v2' not found)") {
		t.Errorf("err = %v", err)
	}
	// A failure that is not worth waiting for comes back as it is.
	bad := serviceerror.NewInvalidArgument("bad build")
	if _, err := retry(context.Background(), notYetPolled, func(context.Context) (int, error) { return 0, bad }); err != bad {
		t.Errorf("err = %v, want %v", err, bad)
	}
}

func TestNotYetPolled(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{serviceerror.NewNotFound("build ID 'v2' not found in Worker Deployment 'entityflow'"), true},
		{serviceerror.NewFailedPrecondition("no Worker Deployment found with name x; does your Worker Deployment have pollers?"), true},
		{serviceerror.NewUnavailable("down"), true},
		{serviceerror.NewFailedPrecondition("requested ramping version entityflow.v1 is already current"), false},
		{serviceerror.NewInvalidArgument("deployment name cannot contain '.'"), false},
		{serviceerror.NewPermissionDenied("no", ""), false},
	} {
		if got := notYetPolled(tc.err); got != tc.want {
			t.Errorf("notYetPolled(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
