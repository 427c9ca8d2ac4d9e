package rollout

import (
	"context"
	"errors"
	"fmt"
	"testing"

	deploymentpb "go.temporal.io/api/deployment/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"google.golang.org/grpc"
)

// fakeDeployment is a Worker Deployment's routing held in memory, behind the
// parts of client.Client that SetCurrent and SetRamping use (fakeClient).
// Each routing change it is asked for may fail with the next of fail: after
// being applied (the answer lost on the way back) or before.
type fakeDeployment struct {
	current, ramping string
	fail             []fakeFailure
	calls            int
}

type fakeFailure struct {
	err     error
	applied bool // the change took effect before the error
}

// fakeClient is the client over a fakeDeployment; any call it does not
// implement panics (nil embedded interfaces).
type fakeClient struct {
	client.Client
	d *fakeDeployment
}

type fakeDeploymentClient struct {
	client.WorkerDeploymentClient
	d *fakeDeployment
}

type fakeHandle struct {
	client.WorkerDeploymentHandle
	d *fakeDeployment
}

type fakeService struct {
	workflowservice.WorkflowServiceClient
}

func (c fakeClient) WorkerDeploymentClient() client.WorkerDeploymentClient {
	return fakeDeploymentClient{d: c.d}
}
func (c fakeDeploymentClient) GetHandle(string) client.WorkerDeploymentHandle {
	return fakeHandle{d: c.d}
}
func (fakeClient) WorkflowService() workflowservice.WorkflowServiceClient { return fakeService{} }

func version(buildID string) *worker.WorkerDeploymentVersion {
	if buildID == "" {
		return nil
	}
	return &worker.WorkerDeploymentVersion{DeploymentName: DefaultDeployment, BuildID: buildID}
}

func (h fakeHandle) Describe(context.Context, client.WorkerDeploymentDescribeOptions) (client.WorkerDeploymentDescribeResponse, error) {
	return client.WorkerDeploymentDescribeResponse{Info: client.WorkerDeploymentInfo{
		RoutingConfig: client.WorkerDeploymentRoutingConfig{CurrentVersion: version(h.d.current), RampingVersion: version(h.d.ramping)},
	}}, nil
}

// change applies a routing change, or fails as the next failure says.
func (f *fakeDeployment) change(apply func()) error {
	f.calls++
	if len(f.fail) == 0 {
		apply()
		return nil
	}
	next := f.fail[0]
	f.fail = f.fail[1:]
	if next.applied {
		apply()
	}
	return next.err
}

// SetCurrentVersion and SetRampingVersion answer without PreviousVersion,
// which the SDK deprecates in favour of Describe before the change.
func (h fakeHandle) SetCurrentVersion(_ context.Context, o client.WorkerDeploymentSetCurrentVersionOptions) (client.WorkerDeploymentSetCurrentVersionResponse, error) {
	f := h.d
	err := f.change(func() {
		f.current = o.BuildID
		if f.ramping == o.BuildID {
			f.ramping = ""
		}
	})
	return client.WorkerDeploymentSetCurrentVersionResponse{}, err
}

func (h fakeHandle) SetRampingVersion(_ context.Context, o client.WorkerDeploymentSetRampingVersionOptions) (client.WorkerDeploymentSetRampingVersionResponse, error) {
	err := h.d.change(func() { h.d.ramping = o.BuildID })
	return client.WorkerDeploymentSetRampingVersionResponse{}, err
}

// CountWorkflow fills in the namespace, as the SDK's client does (namespaceOf).
func (fakeClient) CountWorkflow(_ context.Context, req *workflowservice.CountWorkflowExecutionsRequest) (*workflowservice.CountWorkflowExecutionsResponse, error) {
	req.Namespace = "default"
	return &workflowservice.CountWorkflowExecutionsResponse{}, nil
}

// DescribeWorkerDeployment answers routed: every change has propagated.
func (fakeService) DescribeWorkerDeployment(context.Context, *workflowservice.DescribeWorkerDeploymentRequest, ...grpc.CallOption) (*workflowservice.DescribeWorkerDeploymentResponse, error) {
	return &workflowservice.DescribeWorkerDeploymentResponse{WorkerDeploymentInfo: &deploymentpb.WorkerDeploymentInfo{}}, nil
}

// SetCurrent and SetRamping report the version that was current (ramping)
// before the change, also when a try applied the change but its answer was
// lost and the retry found the new version already in place.
func TestRoutingChangeReportsThePreviousVersionAcrossRetries(t *testing.T) {
	lost := serviceerror.NewUnavailable("connection reset by peer")
	notPolled := serviceerror.NewFailedPrecondition("version v2 has not polled task queue rewards")
	for _, tc := range []struct {
		name             string
		current, ramping string
		fail             []fakeFailure
		ramp             bool // SetRamping v2 instead of SetCurrent v2
		wantPrevious     string
		wantCalls        int
	}{
		{name: "set-current", current: "v1", wantPrevious: "v1", wantCalls: 1},
		{name: "set-current, none current", wantPrevious: "", wantCalls: 1},
		{name: "set-current, already current", current: "v2", wantPrevious: "v2", wantCalls: 1},
		{name: "set-current, applied but the answer lost", current: "v1",
			fail: []fakeFailure{{lost, true}}, wantPrevious: "v1", wantCalls: 2},
		{name: "set-current from none, applied but the answer lost",
			fail: []fakeFailure{{lost, true}}, wantPrevious: "", wantCalls: 2},
		{name: "set-current, refused until polled, then applied but the answer lost", current: "v1",
			fail: []fakeFailure{{notPolled, false}, {lost, true}}, wantPrevious: "v1", wantCalls: 3},
		{name: "set-current, failed without applying", current: "v1",
			fail: []fakeFailure{{lost, false}}, wantPrevious: "v1", wantCalls: 2},
		{name: "set-current of the ramping version, applied but the answer lost", current: "v1", ramping: "v2",
			fail: []fakeFailure{{lost, true}}, wantPrevious: "v1", wantCalls: 2},
		{name: "ramp, applied but the answer lost", current: "v1", ramp: true,
			fail: []fakeFailure{{lost, true}}, wantPrevious: "", wantCalls: 2},
		{name: "ramp replacing a ramp, applied but the answer lost", current: "v1", ramping: "v3", ramp: true,
			fail: []fakeFailure{{lost, true}}, wantPrevious: "v3", wantCalls: 2},
		{name: "ramp, already ramping", current: "v1", ramping: "v2", ramp: true, wantPrevious: "v2", wantCalls: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeDeployment{current: tc.current, ramping: tc.ramping, fail: tc.fail}
			var previous string
			var err error
			if tc.ramp {
				previous, err = SetRamping(context.Background(), fakeClient{d: f}, DefaultDeployment, "v2", 10)
			} else {
				previous, err = SetCurrent(context.Background(), fakeClient{d: f}, DefaultDeployment, "v2")
			}
			if err != nil {
				t.Fatal(err)
			}
			if previous != tc.wantPrevious || f.calls != tc.wantCalls {
				t.Errorf("previous %q after %d calls, want %q after %d", previous, f.calls, tc.wantPrevious, tc.wantCalls)
			}
			if now := map[bool]string{false: f.current, true: f.ramping}[tc.ramp]; now != "v2" {
				t.Errorf("v2 is not in place: current %q, ramping %q", f.current, f.ramping)
			}
		})
	}
}

// A change that keeps failing for good is returned with what it was.
func TestRoutingChangeFailure(t *testing.T) {
	f := &fakeDeployment{current: "v1", fail: []fakeFailure{{serviceerror.NewPermissionDenied("no", ""), false}}}
	previous, err := SetCurrent(context.Background(), fakeClient{d: f}, DefaultDeployment, "v2")
	var denied *serviceerror.PermissionDenied
	if !errors.As(err, &denied) || previous != "" || fmt.Sprint(err) != "setting v2 as the current version of entityflow: no" {
		t.Errorf("SetCurrent: %q, %v", previous, err)
	}
}
