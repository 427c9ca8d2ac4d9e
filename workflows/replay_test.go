package workflows_test

import (
	"os"
	"testing"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/entityflow/entityflow/internal/histories"
	"github.com/entityflow/entityflow/workflows"
)

// TestReplayRecordedHistories replays every history recorded from a real server
// (testdata/*.json.gz, listed in testdata/manifest.json, written by `make
// histories`) against today's workflow code, each under its recorded workflow
// ID. A failure means a change is not deterministic for runs already in
// flight: put it behind workflow.GetVersion.
func TestReplayRecordedHistories(t *testing.T) {
	const dir = "testdata"
	m, err := histories.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Fixtures) == 0 {
		t.Fatal("testdata/manifest.json lists no recorded histories; run `make histories`")
	}
	listed := map[string]bool{}
	for _, fx := range m.Fixtures {
		if listed[fx.File] {
			t.Errorf("testdata/manifest.json lists %s twice", fx.File)
		}
		listed[fx.File] = true
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != histories.ManifestFile && !listed[e.Name()] {
			t.Errorf("testdata/%s is not in testdata/manifest.json: list it (histories.Write does) or delete it", e.Name())
		}
	}
	logger := testLogger(t)
	for _, fx := range m.Fixtures {
		t.Run(fx.File, func(t *testing.T) {
			hist, err := histories.Read(dir, fx.File)
			if err != nil {
				t.Fatalf("listed in testdata/manifest.json: %v", err)
			}
			if typ := histories.WorkflowType(hist); typ != fx.WorkflowType {
				t.Fatalf("a history of %s, listed as %s", typ, fx.WorkflowType)
			}
			started := hist.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes()
			if id := started.GetWorkflowId(); id != "" && id != fx.WorkflowID {
				t.Fatalf("a history of workflow %s, listed as %s", id, fx.WorkflowID)
			}
			r := worker.NewWorkflowReplayer()
			workflows.RegisterRewards(r)
			workflows.RegisterPlatform(r)
			err = r.ReplayWorkflowHistoryWithOptions(logger, hist, worker.ReplayWorkflowHistoryOptions{
				OriginalExecution: workflow.Execution{ID: fx.WorkflowID},
			})
			if err != nil {
				t.Fatalf("replaying %s (%s, release %s, from %s): %v", fx.File, fx.WorkflowID, fx.Release, fx.Scenario, err)
			}
		})
	}
}
