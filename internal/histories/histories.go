// Package histories exports workflow histories from a Temporal server as JSON
// files, the fixtures the replay tests run every workflow change against.
package histories

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/sdk/client"
)

// Run is the history of one run of a workflow.
type Run struct {
	RunID   string
	History *historypb.History
}

// Chain returns the histories of every run of a workflow, first run first,
// following ContinueAsNew links back from the latest run.
func Chain(ctx context.Context, c client.Client, workflowID string) ([]Run, error) {
	desc, err := c.DescribeWorkflowExecution(ctx, workflowID, "")
	if err != nil {
		return nil, fmt.Errorf("describing %s: %w", workflowID, err)
	}
	var runs []Run
	for runID := desc.GetWorkflowExecutionInfo().GetExecution().GetRunId(); runID != ""; {
		hist, err := fetch(ctx, c, workflowID, runID)
		if err != nil {
			return nil, err
		}
		events := hist.GetEvents()
		if len(events) == 0 {
			return nil, fmt.Errorf("workflow %s run %s has no history", workflowID, runID)
		}
		runs = append([]Run{{RunID: runID, History: hist}}, runs...)
		runID = events[0].GetWorkflowExecutionStartedEventAttributes().GetContinuedExecutionRunId()
	}
	return runs, nil
}

func fetch(ctx context.Context, c client.Client, workflowID, runID string) (*historypb.History, error) {
	iter := c.GetWorkflowHistory(ctx, workflowID, runID, false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	hist := &historypb.History{}
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			return nil, fmt.Errorf("reading history of %s/%s: %w", workflowID, runID, err)
		}
		hist.Events = append(hist.Events, ev)
	}
	return hist, nil
}

// Write stores a history as indented JSON, the format of `temporal workflow
// show --output json` that worker.WorkflowReplayer reads.
func Write(path string, hist *historypb.History) error {
	data, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(hist)
	if err != nil {
		return fmt.Errorf("encoding history for %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// WorkflowIDSuffix names the file beside a history that holds its workflow ID.
// Workflows that derive values from their own ID (the activity platform's run
// IDs) replay only under that ID; the replay tests read it from there.
const WorkflowIDSuffix = ".workflow-id"

// WriteWithID stores a history like Write, and its workflow ID beside it.
func WriteWithID(path, workflowID string, hist *historypb.History) error {
	if err := Write(path, hist); err != nil {
		return err
	}
	return os.WriteFile(path+WorkflowIDSuffix, []byte(workflowID+"\n"), 0o644)
}
