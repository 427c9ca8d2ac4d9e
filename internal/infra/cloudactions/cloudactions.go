// Package cloudactions counts what a workflow history costs as Temporal Cloud
// bills it: its Actions, by the rule of https://docs.temporal.io/cloud/actions
// (the documentation's source, docs/evaluate/temporal-cloud/actions.mdx),
// beside what it weighs on the server: history events and their encoded bytes.
// The make cost report (internal/cmd/cost) divides these per applied event.
//
// The rule, as the page states it, and how each part is read from history:
//
//   - Workflow started (client start, Continue-As-New, child start): one per
//     WorkflowExecutionStarted. A Signal-With-Start is one Action in all,
//     whether or not it starts the workflow; history does not tell it from a
//     start and a signal, which count two here (one too many). The paths
//     make cost measures send no signals.
//   - Timer started: one per TimerStarted.
//   - Search Attribute upsert: one per UpsertWorkflowSearchAttributes, none
//     when it sets only TemporalChangeVersion (the versioning attribute is
//     exempt).
//   - Signal sent: one per WorkflowExecutionSignaled.
//   - Update received by Worker: one per accepted update
//     (WorkflowExecutionUpdateAccepted), Update-With-Start included on top of
//     its start. Rejected updates also count but leave no trace in history:
//     the caller adds them (Tally.Add with KindUpdateRejected).
//   - Query received by Worker: not in history; the caller adds them.
//   - Side Effect and Local Activities: "all RecordMarkers from each Workflow
//     Task" count as one Action, so one per workflow task that recorded any
//     marker (SideEffect, LocalActivity and GetVersion's Version marker
//     alike: the page names no exemption for the last, so this is the upper
//     reading for it).
//   - Activity started or retried: the attempt number of each
//     ActivityTaskStarted (attempts before it were starts too).
//   - Child workflow: two per StartChildWorkflowExecutionInitiated.
//   - Workflow Execution Options updated: one per such event.
//
// Activity heartbeats, queries and rejected updates are billed but not in
// history; the project's entities neither heartbeat nor get queried on the
// paths make cost measures.
package cloudactions

import (
	"fmt"
	"maps"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"google.golang.org/protobuf/proto"
)

// Source is the page the rule is taken from.
const Source = "https://docs.temporal.io/cloud/actions"

// Kind names a kind of billable Action.
type Kind string

// The kinds of Action, as the page names them.
const (
	KindWorkflowStarted  Kind = "workflow started"
	KindSignal           Kind = "signal"
	KindUpdate           Kind = "update"
	KindUpdateRejected   Kind = "update rejected"
	KindQuery            Kind = "query"
	KindTimer            Kind = "timer started"
	KindSearchAttributes Kind = "search attribute upsert"
	KindMarkers          Kind = "markers (side effect, local activity, version) per workflow task"
	KindActivity         Kind = "activity started or retried"
	KindChildWorkflow    Kind = "child workflow"
	KindOptionsUpdated   Kind = "workflow options updated"
)

// Kinds lists every kind in the order reports print them.
var Kinds = []Kind{KindWorkflowStarted, KindSignal, KindUpdate, KindUpdateRejected, KindQuery,
	KindTimer, KindSearchAttributes, KindMarkers, KindActivity, KindChildWorkflow, KindOptionsUpdated}

// changeVersionAttribute is the search attribute GetVersion writes, exempt
// from the count.
const changeVersionAttribute = "TemporalChangeVersion"

// Tally is what a set of history events costs.
type Tally struct {
	// Actions holds the billable Actions by kind (absent: none).
	Actions map[Kind]int
	// Events is the number of history events; Bytes their encoded size
	// (protobuf), what the server stores of them before compression.
	Events, Bytes int
	// WorkflowTasks counts completed workflow tasks; Markers the markers
	// recorded (each of them, whereas KindMarkers counts tasks).
	WorkflowTasks, Markers int
	// Runs counts run starts (WorkflowExecutionStarted), ContinuedAsNew the
	// runs that ended by continuing as new.
	Runs, ContinuedAsNew int
}

// Total is the number of Actions of every kind.
func (t Tally) Total() int {
	n := 0
	for _, v := range t.Actions {
		n += v
	}
	return n
}

// Add adds n Actions of kind k: those not in history (rejected updates,
// queries) that the caller knows of.
func (t *Tally) Add(k Kind, n int) {
	if n == 0 {
		return
	}
	if t.Actions == nil {
		t.Actions = map[Kind]int{}
	}
	t.Actions[k] += n
}

// Merge adds o to t.
func (t *Tally) Merge(o Tally) {
	for k, v := range o.Actions {
		t.Add(k, v)
	}
	t.Events += o.Events
	t.Bytes += o.Bytes
	t.WorkflowTasks += o.WorkflowTasks
	t.Markers += o.Markers
	t.Runs += o.Runs
	t.ContinuedAsNew += o.ContinuedAsNew
}

// String prints the Actions by kind in the order of Kinds.
func (t Tally) String() string {
	s := fmt.Sprintf("%d actions", t.Total())
	for _, k := range Kinds {
		if v := t.Actions[k]; v > 0 {
			s += fmt.Sprintf(", %s %d", k, v)
		}
	}
	return s
}

// Window selects the events of a history by their time: From inclusive, To
// exclusive; a zero bound is open.
type Window struct {
	From, To time.Time
}

// Holds reports whether an event at t falls in the window.
func (w Window) Holds(t time.Time) bool {
	return (w.From.IsZero() || !t.Before(w.From)) && (w.To.IsZero() || t.Before(w.To))
}

// Count tallies one run's history.
func Count(hist *historypb.History) Tally {
	return CountIn(hist, Window{})
}

// CountIn tallies the events of one run's history that fall in w. A marker
// task is counted once, in the window of its first marker.
func CountIn(hist *historypb.History, w Window) Tally {
	var t Tally
	markerTasks := map[int64]bool{}
	for _, e := range hist.GetEvents() {
		if !w.Holds(e.GetEventTime().AsTime()) {
			continue
		}
		t.Events++
		t.Bytes += proto.Size(e)
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
			t.Runs++
			t.Add(KindWorkflowStarted, 1)
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
			t.Add(KindSignal, 1)
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
			t.Add(KindUpdate, 1)
		case enumspb.EVENT_TYPE_TIMER_STARTED:
			t.Add(KindTimer, 1)
		case enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
			fields := e.GetUpsertWorkflowSearchAttributesEventAttributes().GetSearchAttributes().GetIndexedFields()
			if slices.ContainsFunc(slices.Collect(maps.Keys(fields)), func(k string) bool { return k != changeVersionAttribute }) {
				t.Add(KindSearchAttributes, 1)
			}
		case enumspb.EVENT_TYPE_MARKER_RECORDED:
			t.Markers++
			task := e.GetMarkerRecordedEventAttributes().GetWorkflowTaskCompletedEventId()
			if !markerTasks[task] {
				markerTasks[task] = true
				t.Add(KindMarkers, 1)
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			t.Add(KindActivity, int(max(1, e.GetActivityTaskStartedEventAttributes().GetAttempt())))
		case enumspb.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
			t.Add(KindChildWorkflow, 2)
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_OPTIONS_UPDATED:
			t.Add(KindOptionsUpdated, 1)
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			t.WorkflowTasks++
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
			t.ContinuedAsNew++
		}
	}
	return t
}

// RunStart tallies what starting a run costs apart from the messages it
// takes: the history up to the end of the run's first workflow task (its
// start, that task and the commands it completed with), without the
// signals and updates delivered with it, which are the events' own cost.
// For a run continued as new this is the entity's price of one ContinueAsNew,
// with Continued, the event that ended the run before.
func RunStart(hist *historypb.History) Tally {
	events := hist.GetEvents()
	end := len(events)
	for i, e := range events {
		if e.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED {
			// The task's commands follow its completion, with the
			// messages (updates) it took between them, up to the next
			// task's scheduling.
			end = i + 1
			for end < len(events) && (commandOf(events[end], e.GetEventId()) || message(events[end])) {
				end++
			}
			break
		}
	}
	var own []*historypb.HistoryEvent
	for _, e := range events[:end] {
		if !message(e) {
			own = append(own, e)
		}
	}
	return Count(&historypb.History{Events: own})
}

// message reports whether e records a message to the workflow (a signal,
// an update's acceptance or completion): an event's own cost.
func message(e *historypb.HistoryEvent) bool {
	switch e.GetEventType() {
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
		enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED,
		enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
		return true
	}
	return false
}

// commandOf reports whether e is a command event of the workflow task whose
// completion is event task: the commands this package counts carry it.
func commandOf(e *historypb.HistoryEvent, task int64) bool {
	switch e.GetEventType() {
	case enumspb.EVENT_TYPE_MARKER_RECORDED:
		return e.GetMarkerRecordedEventAttributes().GetWorkflowTaskCompletedEventId() == task
	case enumspb.EVENT_TYPE_TIMER_STARTED:
		return e.GetTimerStartedEventAttributes().GetWorkflowTaskCompletedEventId() == task
	case enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
		return e.GetUpsertWorkflowSearchAttributesEventAttributes().GetWorkflowTaskCompletedEventId() == task
	case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
		return e.GetActivityTaskScheduledEventAttributes().GetWorkflowTaskCompletedEventId() == task
	}
	return false
}

// PerEvent is a Tally divided by the events applied.
type PerEvent struct {
	Actions map[Kind]float64
	Total   float64
	Events  float64 // history events per applied event
	Bytes   float64
}

// Divide divides t by n applied events; n must be positive.
func Divide(t Tally, n int) (PerEvent, error) {
	if n <= 0 {
		return PerEvent{}, fmt.Errorf("dividing by %d applied events: need at least one", n)
	}
	p := PerEvent{Actions: map[Kind]float64{}, Total: float64(t.Total()) / float64(n),
		Events: float64(t.Events) / float64(n), Bytes: float64(t.Bytes) / float64(n)}
	for k, v := range t.Actions {
		p.Actions[k] = float64(v) / float64(n)
	}
	return p, nil
}
