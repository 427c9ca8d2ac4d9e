package rollout

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/entityflow/entityflow/internal/infra/pacing"
)

// describer answers DescribeWorkflowExecution from a table of workflow IDs
// (a missing one is not found) and records what it was asked; any other
// call panics, as the probe makes none.
type describer struct {
	client.Client
	tasks map[string]*workflowpb.PendingWorkflowTaskInfo
	err   error
	asked []string
}

func (d *describer) DescribeWorkflowExecution(_ context.Context, id, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	d.asked = append(d.asked, id)
	if d.err != nil {
		return nil, d.err
	}
	task, ok := d.tasks[id]
	if !ok {
		return nil, serviceerror.NewNotFound("workflow not found")
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{PendingWorkflowTask: task}, nil
}

// WithWakeAge reads, at each probe, the workflow signalled last at the
// probe before: its workflow task still waiting raises the backlog's age to
// its wait; a started task, none, a gone workflow or an older backlog leave
// the statistics as they are; a failed read fails the probe.
func TestWithWakeAge(t *testing.T) {
	waiting := func(since time.Duration) *workflowpb.PendingWorkflowTaskInfo {
		return &workflowpb.PendingWorkflowTaskInfo{State: enums.PENDING_WORKFLOW_TASK_STATE_SCHEDULED,
			ScheduledTime: timestamppb.New(time.Now().Add(-since))}
	}
	started := &workflowpb.PendingWorkflowTaskInfo{State: enums.PENDING_WORKFLOW_TASK_STATE_STARTED,
		ScheduledTime: timestamppb.New(time.Now().Add(-time.Minute))}
	d := &describer{tasks: map[string]*workflowpb.PendingWorkflowTaskInfo{
		"waiting": waiting(2 * time.Second), "started": started, "idle": nil, "fresh": waiting(10 * time.Millisecond),
	}}
	stats := pacing.Backlog{Count: 3, Age: 500 * time.Millisecond}
	last := ""
	probe := WithWakeAge(d, func(context.Context) (pacing.Backlog, error) { return stats, nil }, func() string { return last })
	steps := []struct {
		name      string
		signalled string // the last signalled when the probe runs
		wantAsked string // the one the probe reads: the previous step's
		atLeast   time.Duration
		atMost    time.Duration
		wantErr   bool
	}{
		{name: "nothing signalled yet", signalled: "waiting", atLeast: 500 * time.Millisecond, atMost: 500 * time.Millisecond},
		{name: "signalled a probe ago, still waiting", signalled: "started", wantAsked: "waiting", atLeast: 2 * time.Second, atMost: 3 * time.Second},
		{name: "its task started: the statistics", signalled: "idle", wantAsked: "started", atLeast: 500 * time.Millisecond, atMost: 500 * time.Millisecond},
		{name: "no task pending", signalled: "gone", wantAsked: "idle", atLeast: 500 * time.Millisecond, atMost: 500 * time.Millisecond},
		{name: "gone since", signalled: "fresh", wantAsked: "gone", atLeast: 500 * time.Millisecond, atMost: 500 * time.Millisecond},
		{name: "younger than the statistics' backlog", signalled: "waiting", wantAsked: "fresh", atLeast: 500 * time.Millisecond, atMost: 500 * time.Millisecond},
	}
	for _, st := range steps {
		last = st.signalled
		d.asked = nil
		b, err := probe(context.Background())
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		asked := ""
		if len(d.asked) > 0 {
			asked = d.asked[len(d.asked)-1]
		}
		if len(d.asked) > 1 || asked != st.wantAsked {
			t.Fatalf("%s: read %v, want %q", st.name, d.asked, st.wantAsked)
		}
		if b.Count != 3 || b.Age < st.atLeast || b.Age > st.atMost {
			t.Fatalf("%s: backlog %+v, want 3 tasks aged %v to %v", st.name, b, st.atLeast, st.atMost)
		}
	}
	d.err = errors.New("frontend unavailable")
	if _, err := probe(context.Background()); err == nil {
		t.Fatal("a failed read did not fail the probe")
	}
}
