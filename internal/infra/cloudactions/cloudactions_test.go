package cloudactions

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/entityflow/entityflow/internal/testkit/histories"
)

// fixtures is the replay fixtures' folder.
var fixtures = filepath.Join("..", "..", "..", "workflows", "testdata")

// read reads a fixture the manifest lists (a retired one would be gone).
func read(t *testing.T, file string) *historypb.History {
	t.Helper()
	m, err := histories.ReadManifest(fixtures)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(m.Fixtures, func(f histories.Fixture) bool { return f.File == file }) {
		t.Fatalf("%s is not in the fixtures' manifest", file)
	}
	hist, err := histories.Read(fixtures, file)
	if err != nil {
		t.Fatal(err)
	}
	return hist
}

// TestCountRecordedHistories counts real histories recorded from servers
// (workflows/testdata, listed in its manifest); the expected figures were
// read off the files' events by hand (jq/python), not by this code.
func TestCountRecordedHistories(t *testing.T) {
	for _, tc := range []struct {
		file            string
		actions         map[Kind]int
		events, tasks   int
		markers, runEnd int // runEnd: runs that continued as new
	}{
		// A new customer's first event as one apply-points-batch update:
		// the start, the update, one marker task (Version, SideEffect and
		// two local activities in the first workflow task), the inactivity
		// timer and one search attribute upsert (the TemporalChangeVersion
		// one is exempt); the run then continued as new.
		{file: "rewards-v7-batch-run1.json.gz", events: 14, tasks: 1, markers: 4, runEnd: 1, actions: map[Kind]int{
			KindWorkflowStarted: 1, KindUpdate: 1, KindMarkers: 1, KindTimer: 1, KindSearchAttributes: 1}},
		// A continued run: two signals carried over the ContinueAsNew, two
		// updates.
		{file: "rewards-v7-continue-as-new-run2.json.gz", events: 19, tasks: 2, markers: 2, runEnd: 1, actions: map[Kind]int{
			KindWorkflowStarted: 1, KindSignal: 2, KindUpdate: 2, KindMarkers: 1, KindTimer: 1, KindSearchAttributes: 1}},
		// The change feed on: a local PublishChanges per workflow task that
		// made a change, so the marker tasks follow the workflow tasks, and
		// three PublishChanges activities.
		{file: "rewards-v7-feed-can-run1.json.gz", events: 118, tasks: 17, markers: 19, runEnd: 1, actions: map[Kind]int{
			KindWorkflowStarted: 1, KindUpdate: 15, KindMarkers: 14, KindTimer: 2, KindSearchAttributes: 4, KindActivity: 3}},
		{file: "rewards-v7-tiers-run1.json.gz", events: 56, tasks: 9, markers: 4, actions: map[Kind]int{
			KindWorkflowStarted: 1, KindUpdate: 4, KindSignal: 2, KindMarkers: 1, KindTimer: 2, KindSearchAttributes: 4, KindActivity: 2}},
		// The first release: an upsert per change, no version ladder.
		{file: "rewards-v1-unenroll-burst-run1.json.gz", events: 44, tasks: 6, markers: 2, runEnd: 1, actions: map[Kind]int{
			KindWorkflowStarted: 1, KindSignal: 8, KindMarkers: 1, KindTimer: 1, KindSearchAttributes: 6, KindActivity: 1}},
		// Two children initiated: two Actions each.
		{file: "platform-v1-run-existing-child.json.gz", events: 36, tasks: 6, markers: 1, actions: map[Kind]int{
			KindWorkflowStarted: 1, KindChildWorkflow: 4, KindMarkers: 1, KindActivity: 4}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			got := Count(read(t, tc.file))
			if got.Events != tc.events || got.WorkflowTasks != tc.tasks || got.Markers != tc.markers || got.ContinuedAsNew != tc.runEnd || got.Runs != 1 {
				t.Errorf("events %d, tasks %d, markers %d, continued %d, runs %d; want %d, %d, %d, %d, 1",
					got.Events, got.WorkflowTasks, got.Markers, got.ContinuedAsNew, got.Runs, tc.events, tc.tasks, tc.markers, tc.runEnd)
			}
			want := 0
			for _, k := range Kinds {
				if got.Actions[k] != tc.actions[k] {
					t.Errorf("%s: %d actions, want %d", k, got.Actions[k], tc.actions[k])
				}
				want += tc.actions[k]
			}
			if got.Total() != want {
				t.Errorf("total %d, want %d", got.Total(), want)
			}
			if got.Bytes <= got.Events {
				t.Errorf("%d bytes for %d events", got.Bytes, got.Events)
			}
		})
	}
}

// TestRunStartOfAContinuedRun prices one ContinueAsNew from a recorded
// continued run: its start, its first workflow task and that task's
// commands (events 1 and 4-9, 12, 13 of the file), without the signals it
// inherited and the update it took in that task.
func TestRunStartOfAContinuedRun(t *testing.T) {
	got := RunStart(read(t, "rewards-v7-continue-as-new-run2.json.gz"))
	want := map[Kind]int{KindWorkflowStarted: 1, KindMarkers: 1, KindTimer: 1, KindSearchAttributes: 1}
	if got.Events != 9 || got.WorkflowTasks != 1 || got.Markers != 2 {
		t.Errorf("events %d, tasks %d, markers %d; want 9, 1, 2", got.Events, got.WorkflowTasks, got.Markers)
	}
	for _, k := range Kinds {
		if got.Actions[k] != want[k] {
			t.Errorf("%s: %d, want %d", k, got.Actions[k], want[k])
		}
	}
}

// event builds a synthetic history event.
func event(id int64, at time.Time, typ enumspb.EventType, attrs func(*historypb.HistoryEvent)) *historypb.HistoryEvent {
	e := &historypb.HistoryEvent{EventId: id, EventTime: timestamppb.New(at), EventType: typ}
	if attrs != nil {
		attrs(e)
	}
	return e
}

func upsert(fields ...string) func(*historypb.HistoryEvent) {
	return func(e *historypb.HistoryEvent) {
		indexed := map[string]*commonpb.Payload{}
		for _, f := range fields {
			indexed[f] = &commonpb.Payload{Data: []byte(`"x"`)}
		}
		e.Attributes = &historypb.HistoryEvent_UpsertWorkflowSearchAttributesEventAttributes{
			UpsertWorkflowSearchAttributesEventAttributes: &historypb.UpsertWorkflowSearchAttributesEventAttributes{
				SearchAttributes: &commonpb.SearchAttributes{IndexedFields: indexed}}}
	}
}

func marker(task int64) func(*historypb.HistoryEvent) {
	return func(e *historypb.HistoryEvent) {
		e.Attributes = &historypb.HistoryEvent_MarkerRecordedEventAttributes{
			MarkerRecordedEventAttributes: &historypb.MarkerRecordedEventAttributes{MarkerName: "LocalActivity", WorkflowTaskCompletedEventId: task}}
	}
}

func activityStarted(attempt int32) func(*historypb.HistoryEvent) {
	return func(e *historypb.HistoryEvent) {
		e.Attributes = &historypb.HistoryEvent_ActivityTaskStartedEventAttributes{
			ActivityTaskStartedEventAttributes: &historypb.ActivityTaskStartedEventAttributes{Attempt: attempt}}
	}
}

// TestCountRules checks each rule on small synthetic histories, and the
// window.
func TestCountRules(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for _, tc := range []struct {
		name   string
		events []*historypb.HistoryEvent
		w      Window
		want   map[Kind]int
		count  int
	}{
		{name: "only TemporalChangeVersion is exempt", events: []*historypb.HistoryEvent{
			event(1, at(0), enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES, upsert("TemporalChangeVersion")),
			event(2, at(0), enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES, upsert("TemporalChangeVersion", "RewardsTier")),
			event(3, at(0), enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES, upsert("RewardsTier", "RewardsPoints")),
		}, want: map[Kind]int{KindSearchAttributes: 2}, count: 3},
		{name: "markers count once per workflow task", events: []*historypb.HistoryEvent{
			event(5, at(0), enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, nil),
			event(6, at(0), enumspb.EVENT_TYPE_MARKER_RECORDED, marker(5)),
			event(7, at(0), enumspb.EVENT_TYPE_MARKER_RECORDED, marker(5)),
			event(8, at(0), enumspb.EVENT_TYPE_MARKER_RECORDED, marker(5)),
			event(11, at(1), enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, nil),
			event(12, at(1), enumspb.EVENT_TYPE_MARKER_RECORDED, marker(11)),
		}, want: map[Kind]int{KindMarkers: 2}, count: 6},
		{name: "each activity attempt counts", events: []*historypb.HistoryEvent{
			event(1, at(0), enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED, activityStarted(3)),
			event(2, at(0), enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED, activityStarted(1)),
		}, want: map[Kind]int{KindActivity: 4}, count: 2},
		{name: "starts, signals, updates, timers, children", events: []*historypb.HistoryEvent{
			event(1, at(0), enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED, nil),
			event(2, at(0), enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED, nil),
			event(3, at(0), enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED, nil),
			event(4, at(0), enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED, nil),
			event(5, at(0), enumspb.EVENT_TYPE_TIMER_STARTED, nil),
			event(6, at(0), enumspb.EVENT_TYPE_TIMER_FIRED, nil),
			event(7, at(0), enumspb.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED, nil),
			event(8, at(0), enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_OPTIONS_UPDATED, nil),
			event(9, at(0), enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW, nil),
		}, want: map[Kind]int{KindWorkflowStarted: 1, KindSignal: 1, KindUpdate: 1, KindTimer: 1, KindChildWorkflow: 2, KindOptionsUpdated: 1}, count: 9},
		{name: "the window takes events by time, from inclusive, to exclusive", w: Window{From: at(1), To: at(3)}, events: []*historypb.HistoryEvent{
			event(1, at(0), enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED, nil),
			event(2, at(1), enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED, nil),
			event(3, at(2), enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED, nil),
			event(4, at(3), enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED, nil),
		}, want: map[Kind]int{KindUpdate: 2}, count: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CountIn(&historypb.History{Events: tc.events}, tc.w)
			for _, k := range Kinds {
				if got.Actions[k] != tc.want[k] {
					t.Errorf("%s: %d, want %d", k, got.Actions[k], tc.want[k])
				}
			}
			if got.Events != tc.count {
				t.Errorf("%d events, want %d", got.Events, tc.count)
			}
		})
	}
}

func TestDivideAndMerge(t *testing.T) {
	var total Tally
	total.Merge(Tally{Actions: map[Kind]int{KindUpdate: 3, KindMarkers: 1}, Events: 10, Bytes: 1000})
	total.Merge(Tally{Actions: map[Kind]int{KindUpdate: 1}, Events: 6, Bytes: 600})
	total.Add(KindQuery, 0)
	if _, ok := total.Actions[KindQuery]; ok {
		t.Error("adding no queries made an entry")
	}
	p, err := Divide(total, 4)
	if err != nil {
		t.Fatal(err)
	}
	if p.Total != 1.25 || p.Actions[KindUpdate] != 1 || p.Events != 4 || p.Bytes != 400 {
		t.Errorf("per event %+v", p)
	}
	if _, err := Divide(total, 0); err == nil {
		t.Error("dividing by no events: no error")
	}
}
