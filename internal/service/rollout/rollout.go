// Package rollout is the operator's side of a versioned deploy of the workers
// (Worker Deployment Versioning): make a new Worker Deployment Version current
// once its workers poll, see which version the rewards entities run on, and
// nudge the entities still on an older version so that they continue as new
// onto the current one.
//
// A rewards entity is Pinned: each run stays on the version that started it
// and moves at a ContinueAsNew, which it makes when a workflow task tells it
// the current version has changed. An idle entity gets no workflow task, so it
// would stay on its version for as long as it is idle; Nudge wakes it with the
// no-op signal rewards.SignalNudge. Which version an execution runs on comes
// from visibility (search attribute TemporalWorkerDeploymentVersion, value
// "deployment:build_id", missing for an unversioned execution), which is
// eventually consistent: a count taken just after a move may still show it on
// the old version, and a second sweep after a first is harmless.
package rollout

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/entityflow/entityflow/internal/infra/backoff"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// DefaultDeployment is the project's Worker Deployment name, for workers and
// tools not told another (WORKER_DEPLOYMENT_NAME).
const DefaultDeployment = "entityflow"

// DeploymentEnv is the environment variable naming the Worker Deployment.
const DeploymentEnv = "WORKER_DEPLOYMENT_NAME"

// waitPolicy paces the waits for a version's first poll and for routing
// changes to reach the task queues: short at first, never more than 5 s
// apart, until the caller's context ends.
var waitPolicy = backoff.Policy{Initial: 250 * time.Millisecond, Max: 5 * time.Second}

// errPropagating says a routing change has not reached every task queue yet.
var errPropagating = errors.New("the routing change is still propagating to the task queues")

// ErrStillPropagating reports a routing change that was made but had not
// reached every task queue after PropagationWait: entities woken meanwhile
// may not hear of it yet, so a sweep is worth running again later.
var ErrStillPropagating = errors.New("routing change made, still propagating to the task queues")

// SetCurrent makes buildID the current version of deployment: new entities
// start on it, and every entity moves to it at its next ContinueAsNew. A
// version exists only once one of its workers has polled, and it must poll
// every task queue of the current version, so SetCurrent waits for that
// (and through transient failures) until ctx ends; then it waits until the
// change has reached every task queue, so that an entity woken afterwards
// (Nudge) is told of it. It returns the previous current build ID, empty when
// there was none, and buildID itself when it was current already, which
// changes nothing.
func SetCurrent(ctx context.Context, c client.Client, deployment, buildID string) (previous string, err error) {
	if err := checkNames(deployment, buildID); err != nil {
		return "", err
	}
	h := c.WorkerDeploymentClient().GetHandle(deployment)
	current := func(r client.WorkerDeploymentRoutingConfig) *worker.WorkerDeploymentVersion { return r.CurrentVersion }
	previous, err = changeRouting(ctx, h, buildID, current, func(ctx context.Context, token []byte) error {
		_, err := h.SetCurrentVersion(ctx, client.WorkerDeploymentSetCurrentVersionOptions{BuildID: buildID, ConflictToken: token})
		return err
	})
	if err != nil {
		return "", fmt.Errorf("setting %s as the current version of %s: %w", buildID, deployment, err)
	}
	if _, err := routed(ctx, c, deployment); err != nil {
		return previous, fmt.Errorf("%s is the current version of %s: %w", buildID, deployment, err)
	}
	return previous, nil
}

// SetRamping makes buildID the target of percentage (0 to 100) of the
// deployment's workflow IDs instead of the current version, waiting as
// SetCurrent does, and returns the previous ramping build ID. The share is
// taken by workflow ID: new entities in it start on buildID, and running
// entities in it are told of a new target and move at their next
// ContinueAsNew, as for a new current version. Making the ramping version
// current ends the ramp.
func SetRamping(ctx context.Context, c client.Client, deployment, buildID string, percentage float32) (previous string, err error) {
	if err := checkNames(deployment, buildID); err != nil {
		return "", err
	}
	if percentage < 0 || percentage > 100 {
		return "", fmt.Errorf("ramp percentage %v: must be from 0 to 100", percentage)
	}
	h := c.WorkerDeploymentClient().GetHandle(deployment)
	ramping := func(r client.WorkerDeploymentRoutingConfig) *worker.WorkerDeploymentVersion { return r.RampingVersion }
	previous, err = changeRouting(ctx, h, buildID, ramping, func(ctx context.Context, token []byte) error {
		_, err := h.SetRampingVersion(ctx, client.WorkerDeploymentSetRampingVersionOptions{BuildID: buildID, Percentage: percentage, ConflictToken: token})
		return err
	})
	if err != nil {
		return "", fmt.Errorf("ramping %s of %s at %v%%: %w", buildID, deployment, percentage, err)
	}
	if _, err := routed(ctx, c, deployment); err != nil {
		return previous, fmt.Errorf("%s of %s ramps at %v%%: %w", buildID, deployment, percentage, err)
	}
	return previous, nil
}

// changeRouting puts buildID in the routing slot (the current or the ramping
// version) with set, which gets the conflict token of a fresh description,
// retrying while the version has not polled yet or the server fails
// transiently (notYetPolled), and returns the build ID the slot held before.
// That is read from the first description, and from a later one only while
// the slot does not hold buildID yet (someone else changed it meanwhile): a
// try whose change was applied but whose answer was lost makes the retry
// find buildID in place, and the version it replaced is still the one
// reported.
func changeRouting(ctx context.Context, h client.WorkerDeploymentHandle, buildID string,
	slot func(client.WorkerDeploymentRoutingConfig) *worker.WorkerDeploymentVersion,
	set func(ctx context.Context, conflictToken []byte) error,
) (previous string, err error) {
	described := false
	_, err = retry(ctx, notYetPolled, func(ctx context.Context) (struct{}, error) {
		desc, err := h.Describe(ctx, client.WorkerDeploymentDescribeOptions{})
		if err != nil {
			return struct{}{}, err
		}
		if holds := buildIDOf(slot(desc.Info.RoutingConfig)); !described || holds != buildID {
			previous, described = holds, true
		}
		return struct{}{}, set(ctx, desc.ConflictToken)
	})
	return previous, err
}

// buildIDOf is v's build ID, empty for no version.
func buildIDOf(v *worker.WorkerDeploymentVersion) string {
	if v == nil {
		return ""
	}
	return v.BuildID
}

// notYetPolled reports whether a routing change failed because the
// deployment or the version is not known yet, or the version's workers do
// not poll every task queue they must yet (NotFound; FailedPrecondition,
// which is also what server 1.29 answers for an unknown deployment, and the
// answer when another change came between the description and this one),
// or transiently.
func notYetPolled(err error) bool {
	var (
		notFound     *serviceerror.NotFound
		precondition *serviceerror.FailedPrecondition
	)
	if errors.As(err, &precondition) {
		// Asking to ramp the current version (or the like) will not change
		// by waiting.
		return !strings.Contains(precondition.Error(), "already current")
	}
	return errors.As(err, &notFound) || backoff.Transient(err)
}

// retry is backoff.Retry under waitPolicy. When ctx ends while it waits, the
// error names the last failure as well, which says what it was waiting for.
func retry[T any](ctx context.Context, retryable func(error) bool, try func(context.Context) (T, error)) (T, error) {
	var last error
	v, err := backoff.Retry(ctx, waitPolicy, retryable, func(ctx context.Context) (T, error) {
		v, err := try(ctx)
		last = err
		return v, err
	}, "rollout")
	if err != nil && last != nil && err != last {
		err = fmt.Errorf("%w (last: %v)", err, last)
	}
	return v, err
}

// describe returns what the server knows of deployment. The SDK's
// WorkerDeploymentHandle.Describe leaves out each version's status, its
// drainage times and whether a routing change is still propagating, so this
// asks the service directly.
func describe(ctx context.Context, c client.Client, deployment string) (*workflowservice.DescribeWorkerDeploymentResponse, error) {
	ns, err := namespaceOf(ctx, c)
	if err != nil {
		return nil, err
	}
	resp, err := c.WorkflowService().DescribeWorkerDeployment(ctx, &workflowservice.DescribeWorkerDeploymentRequest{
		Namespace:      ns,
		DeploymentName: deployment,
	})
	var notFound *serviceerror.NotFound
	switch {
	case errors.As(err, &notFound):
		return nil, fmt.Errorf("describing Worker Deployment %s (no worker of it has polled namespace %s?): %w", deployment, ns, err)
	case err != nil:
		return nil, fmt.Errorf("describing Worker Deployment %s: %w", deployment, err)
	}
	return resp, nil
}

// PropagationWait bounds how long SetCurrent, SetRamping and Nudge wait for a
// routing change to reach the task queues: seconds on a healthy server;
// longer means the server's deployment workflows lag, which an operator
// should hear of rather than wait out (the change itself stands).
var PropagationWait = 2 * time.Minute

// routed waits until the deployment's last routing change has reached every
// task queue, and returns its description then. After PropagationWait it
// returns the last description with ErrStillPropagating.
func routed(ctx context.Context, c client.Client, deployment string) (*workflowservice.DescribeWorkerDeploymentResponse, error) {
	wait, cancel := context.WithTimeout(ctx, PropagationWait)
	defer cancel()
	var last *workflowservice.DescribeWorkerDeploymentResponse
	retryable := func(err error) bool { return errors.Is(err, errPropagating) || backoff.Transient(err) }
	resp, err := retry(wait, retryable, func(ctx context.Context) (*workflowservice.DescribeWorkerDeploymentResponse, error) {
		resp, err := describe(ctx, c, deployment)
		if err != nil {
			return nil, err
		}
		if resp.GetWorkerDeploymentInfo().GetRoutingConfigUpdateState() == enums.ROUTING_CONFIG_UPDATE_STATE_IN_PROGRESS {
			last = resp
			return nil, errPropagating
		}
		return resp, nil
	})
	if err != nil && last != nil && ctx.Err() == nil && wait.Err() != nil {
		return last, fmt.Errorf("%w after %v", ErrStillPropagating, PropagationWait)
	}
	return resp, err
}

// namespaceOf returns the namespace c was dialled for, which the service
// calls in describe need. client.Client does not expose it, but its
// CountWorkflow fills in the namespace of a request that has none, as every
// call of the SDK's client does: a cheap count tells it.
func namespaceOf(ctx context.Context, c client.Client) (string, error) {
	req := &workflowservice.CountWorkflowExecutionsRequest{Query: "WorkflowId = ''"}
	if _, err := c.CountWorkflow(ctx, req); err != nil {
		return "", fmt.Errorf("reading the client's namespace: %w", err)
	}
	if req.Namespace == "" {
		return "", errors.New("reading the client's namespace: the SDK did not fill it in")
	}
	return req.Namespace, nil
}

// checkNames checks a deployment name and a build ID.
func checkNames(deployment, buildID string) error {
	if err := ValidateDeployment(deployment); err != nil {
		return err
	}
	return ValidateBuildID(buildID)
}

// ValidateDeployment refuses a Worker Deployment name that the server would
// refuse (empty, or with '.' or ':') or that could not be quoted in a
// visibility query (a quote, a backslash, a control character), so that a
// command line can refuse it before it connects.
func ValidateDeployment(name string) error {
	if err := checkName("deployment name", name); err != nil {
		return err
	}
	if strings.ContainsAny(name, ".:") {
		return fmt.Errorf("deployment name %q: '.' and ':' are not allowed", name)
	}
	return nil
}

// ValidateBuildID refuses a build ID that is empty or could not be quoted in
// a visibility query.
func ValidateBuildID(id string) error {
	return checkName("build ID", id)
}

// checkName refuses an empty name and one with a quote, a backslash or a
// control character.
func checkName(what, s string) error {
	if s == "" {
		return fmt.Errorf("%s is empty", what)
	}
	if strings.ContainsFunc(s, func(r rune) bool { return r == '\'' || r == '"' || r == '\\' || r < ' ' || r == 0x7f }) {
		return fmt.Errorf("%s %q: quotes, backslashes and control characters are not allowed", what, s)
	}
	return nil
}

// Visibility queries over the running rewards entities. The server keeps
// TemporalWorkerDeploymentVersion ("deployment:build_id") on every execution
// whose last workflow task a versioned worker completed; it is missing
// (NULL) on an unversioned one, and `!=` does not match a missing value.
const (
	versionAttr     = "TemporalWorkerDeploymentVersion"
	runningEntities = "WorkflowType = '" + rewards.RewardsWorkflowType + "' AND ExecutionStatus = 'Running'"
)

// versionValue is a version as visibility holds it.
func versionValue(deployment, buildID string) string { return deployment + ":" + buildID }

// onVersionQuery matches the running entities on one version.
func onVersionQuery(deployment, buildID string) string {
	return fmt.Sprintf("%s AND %s = '%s'", runningEntities, versionAttr, versionValue(deployment, buildID))
}

// unversionedQuery matches the running entities on no version.
func unversionedQuery() string {
	return fmt.Sprintf("%s AND %s IS NULL", runningEntities, versionAttr)
}

// notOnCurrentQuery matches the running entities Nudge wakes: those on
// neither the current version of deployment nor its ramping version (empty
// when there is no ramp), so the unversioned ones and those on any other
// version (of this deployment or another). An entity on the ramping version
// is where a ramp put it, and nudging it would change nothing until the
// ramping version is made current. With no current version (currentBuildID
// empty: unversioned workers take new workflows) it matches every versioned
// one not on the ramping version.
func notOnCurrentQuery(deployment, currentBuildID, rampingBuildID string) string {
	notRamping := ""
	if rampingBuildID != "" {
		notRamping = fmt.Sprintf(" AND %s != '%s'", versionAttr, versionValue(deployment, rampingBuildID))
	}
	switch {
	case currentBuildID == "":
		return fmt.Sprintf("%s AND %s IS NOT NULL%s", runningEntities, versionAttr, notRamping)
	case notRamping == "":
		return fmt.Sprintf("%s AND (%s IS NULL OR %s != '%s')", runningEntities, versionAttr, versionAttr, versionValue(deployment, currentBuildID))
	}
	return fmt.Sprintf("%s AND (%s IS NULL OR (%s != '%s'%s))", runningEntities, versionAttr, versionAttr, versionValue(deployment, currentBuildID), notRamping)
}
