package workflows_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/entityflow/entityflow/internal/histories"
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
			workflows.RegisterRewards(r)
			workflows.RegisterPlatform(r)
			if err := replay(r, logger, file); err != nil {
				t.Fatalf("replaying %s: %v", file, err)
			}
		})
	}
}

// replay replays one history file, under its original workflow ID when one is
// recorded beside it (the activity platform derives run IDs from it).
func replay(r worker.WorkflowReplayer, logger log.Logger, file string) error {
	id, err := os.ReadFile(file + histories.WorkflowIDSuffix)
	if errors.Is(err, fs.ErrNotExist) {
		return r.ReplayWorkflowHistoryFromJSONFile(logger, file)
	}
	if err != nil {
		return err
	}
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	hist, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
	if err != nil {
		return err
	}
	return r.ReplayWorkflowHistoryWithOptions(logger, hist, worker.ReplayWorkflowHistoryOptions{
		OriginalExecution: workflow.Execution{ID: strings.TrimSpace(string(id))},
	})
}
