package workflows_test

import (
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/entityflow/entityflow/workflows"
)

// TestReplayRecordedHistories replays every history recorded from a real server
// (testdata/*.json, written by `make histories`) against today's workflow code.
// A failure means a change is not deterministic for runs already in flight: put
// it behind workflow.GetVersion.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no recorded histories in testdata/; run `make histories`")
	}
	logger := testLogger(t)
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(workflows.RewardsWorkflow, workflow.RegisterOptions{Name: workflows.RewardsWorkflowType})
			r.RegisterWorkflowWithOptions(workflows.RunActivityWorkflow, workflow.RegisterOptions{Name: workflows.RunActivityWorkflowType})
			r.RegisterWorkflowWithOptions(workflows.TaskInstanceWorkflow, workflow.RegisterOptions{Name: workflows.TaskInstanceWorkflowType})
			r.RegisterWorkflowWithOptions(workflows.ScheduleFireWorkflow, workflow.RegisterOptions{Name: workflows.ScheduleFireWorkflowType})
			if err := r.ReplayWorkflowHistoryFromJSONFile(logger, file); err != nil {
				t.Fatalf("replaying %s: %v", file, err)
			}
		})
	}
}
