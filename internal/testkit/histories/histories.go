// Package histories exports workflow histories from a Temporal server as
// replay fixtures: gzip-compressed JSON files in one directory, listed in its
// manifest with the workflow ID, type, release and scenario of each. The
// replay tests run every workflow change against them.
package histories

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/sdk/client"
)

// The releases fixtures are recorded under today. Raise one with every
// release-worthy change of that side's workflows: recorders name their files
// after it, so the fixtures of earlier releases stay and go on replaying.
const (
	// RewardsRelease is the release of the rewards entity (RewardsWorkflow).
	RewardsRelease = "v8"
	// PlatformRelease is the release of the activity platform's workflows.
	PlatformRelease = "v2"
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

// Novel returns the runs that show something no run before them in runs
// shows: an event type, a workflow task failure cause or timeout type, or the
// way the run ends (completed, continued as new, still open). A scenario that
// drives a workflow through many runs of the same shape (a burst split by
// ContinueAsNew) records these runs only; the first run is always among them.
func Novel(runs []Run) []Run {
	seen := map[string]bool{}
	var novel []Run
	for _, r := range runs {
		added := false
		for _, s := range shape(r.History) {
			if !seen[s] {
				seen[s], added = true, true
			}
		}
		if added {
			novel = append(novel, r)
		}
	}
	return novel
}

// shape lists the features of a history that Novel compares.
func shape(hist *historypb.History) []string {
	var s []string
	events := hist.GetEvents()
	for _, e := range events {
		s = append(s, "event "+e.GetEventType().String())
		switch e.GetEventType() {
		case enums.EVENT_TYPE_WORKFLOW_TASK_FAILED:
			s = append(s, "task failed "+e.GetWorkflowTaskFailedEventAttributes().GetCause().String())
		case enums.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
			s = append(s, "task timed out "+e.GetWorkflowTaskTimedOutEventAttributes().GetTimeoutType().String())
		}
	}
	if len(events) > 0 {
		s = append(s, "ends with "+events[len(events)-1].GetEventType().String())
	}
	return s
}

// ManifestFile names the manifest in a fixture directory.
const ManifestFile = "manifest.json"

// Fixture describes one fixture file in the manifest.
type Fixture struct {
	// File is the file's name in the fixture directory: {side}-{release}-{name}.json.gz.
	File string `json:"file"`
	// WorkflowID is the recorded execution's workflow ID. Workflows that
	// derive values from their own ID (the activity platform's run IDs)
	// replay only under it.
	WorkflowID string `json:"workflow_id"`
	// WorkflowType is the recorded execution's workflow type.
	WorkflowType string `json:"workflow_type"`
	// Release is the release of the workflow code that made the history.
	Release string `json:"release"`
	// Scenario is the test that played it.
	Scenario string `json:"scenario"`
}

// Retired records a fixture taken out of the replay set on purpose. Its file
// is deleted and no longer in Fixtures; the replay tests accept that only for
// a file listed here, and entries stay for good (dropping one makes the file
// count as lost again).
type Retired struct {
	// File is the fixture's file name, as it was listed.
	File string `json:"file"`
	// Date is the day it was retired, as YYYY-MM-DD.
	Date string `json:"date"`
	// Reason says why, e.g. "release 1 support removed: minSupported raised".
	Reason string `json:"reason"`
}

// Manifest lists a directory's fixtures, ordered by file name, and the
// fixtures retired from it. Readers that know only Fixtures read it as before.
type Manifest struct {
	Fixtures []Fixture `json:"fixtures"`
	Retired  []Retired `json:"retired"`
}

// Validate checks a manifest: every fixture complete and named after its
// release, no file listed or retired twice, every retirement dated
// (YYYY-MM-DD) and explained, and no file both listed and retired. The error
// names every problem.
func (m Manifest) Validate() error {
	var errs []error
	listed := map[string]bool{}
	for _, fx := range m.Fixtures {
		if err := check(fx); err != nil {
			errs = append(errs, err)
		}
		if listed[fx.File] {
			errs = append(errs, fmt.Errorf("fixture %s is listed twice", fx.File))
		}
		listed[fx.File] = true
	}
	retired := map[string]bool{}
	for _, r := range m.Retired {
		if !plainName(r.File) {
			errs = append(errs, fmt.Errorf("retired file %q: want a plain name ending in .json.gz", r.File))
		}
		if _, err := time.Parse(time.DateOnly, r.Date); err != nil {
			errs = append(errs, fmt.Errorf("retired fixture %s: date %q is not YYYY-MM-DD: %w", r.File, r.Date, err))
		}
		if strings.TrimSpace(r.Reason) == "" {
			errs = append(errs, fmt.Errorf("retired fixture %s: a reason is required", r.File))
		}
		if listed[r.File] {
			errs = append(errs, fmt.Errorf("fixture %s is both listed and retired", r.File))
		}
		if retired[r.File] {
			errs = append(errs, fmt.Errorf("fixture %s is retired twice", r.File))
		}
		retired[r.File] = true
	}
	return errors.Join(errs...)
}

// FileName returns the name of a fixture: side is "rewards" or "platform",
// name says what the history shows.
func FileName(side, release, name string) string {
	return side + "-" + release + "-" + name + ".json.gz"
}

// ReadManifest reads a fixture directory's manifest; a directory without one
// has an empty manifest.
func ReadManifest(dir string) (Manifest, error) {
	var m Manifest
	data, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return m, fmt.Errorf("reading the fixture manifest: %w", err)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("reading %s: %w", filepath.Join(dir, ManifestFile), err)
	}
	return m, nil
}

// Read reads a fixture file's history.
func Read(dir, file string) (*historypb.History, error) {
	f, err := os.Open(filepath.Join(dir, file))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", file, err)
	}
	hist, err := client.HistoryFromJSON(zr, client.HistoryJSONOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", file, err)
	}
	return hist, nil
}

// WorkflowType returns the workflow type a history's first event names.
func WorkflowType(hist *historypb.History) string {
	return hist.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes().GetWorkflowType().GetName()
}

// Write stores a history in dir as fx.File, gzip-compressed JSON in the
// format of `temporal workflow show --output json`, and lists it in the
// manifest (fx.WorkflowType is taken from the history when empty). Writing a
// file again replaces it; a file the manifest gives to another release is
// refused, so re-recording never overwrites an earlier release's history, and
// so is a retired file. The manifest's retired list is kept as it is.
func Write(dir string, fx Fixture, hist *historypb.History) error {
	if len(hist.GetEvents()) == 0 {
		return fmt.Errorf("fixture %s: empty history", fx.File)
	}
	if fx.WorkflowType == "" {
		fx.WorkflowType = WorkflowType(hist)
	}
	if err := check(fx); err != nil {
		return err
	}
	if typ := WorkflowType(hist); typ != fx.WorkflowType {
		return fmt.Errorf("fixture %s: the history is of workflow type %s, not %s", fx.File, typ, fx.WorkflowType)
	}
	data, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(hist)
	if err != nil {
		return fmt.Errorf("encoding history for %s: %w", fx.File, err)
	}
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return err
	}
	if _, err := zw.Write(append(data, '\n')); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	unlock, err := lock(dir)
	if err != nil {
		return err
	}
	defer unlock()
	m, err := ReadManifest(dir)
	if err != nil {
		return err
	}
	if i := slices.IndexFunc(m.Retired, func(r Retired) bool { return r.File == fx.File }); i >= 0 {
		return fmt.Errorf("fixture %s was retired on %s (%s): record under another name", fx.File, m.Retired[i].Date, m.Retired[i].Reason)
	}
	i := slices.IndexFunc(m.Fixtures, func(have Fixture) bool { return have.File == fx.File })
	switch {
	case i < 0:
		m.Fixtures = append(m.Fixtures, fx)
		slices.SortFunc(m.Fixtures, func(a, b Fixture) int { return strings.Compare(a.File, b.File) })
	case m.Fixtures[i].Release != fx.Release:
		return fmt.Errorf("fixture %s belongs to release %s: record release %s under its own file names", fx.File, m.Fixtures[i].Release, fx.Release)
	default:
		m.Fixtures[i] = fx
	}
	if err := writeFile(filepath.Join(dir, fx.File), gz.Bytes()); err != nil {
		return err
	}
	return WriteManifest(dir, m)
}

// WriteManifest stores a manifest in dir after validating it. The retired
// list is written even when empty, so that the manifest shows where a
// retirement goes.
func WriteManifest(dir string, m Manifest) error {
	if err := m.Validate(); err != nil {
		return fmt.Errorf("writing the fixture manifest: %w", err)
	}
	if m.Retired == nil {
		m.Retired = []Retired{}
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the fixture manifest: %w", err)
	}
	return writeFile(filepath.Join(dir, ManifestFile), append(data, '\n'))
}

func check(fx Fixture) error {
	switch {
	case !plainName(fx.File):
		return fmt.Errorf("fixture file %q: want a plain name ending in .json.gz", fx.File)
	case fx.WorkflowID == "", fx.WorkflowType == "", fx.Release == "", fx.Scenario == "":
		return fmt.Errorf("fixture %s: workflow ID, workflow type, release and scenario are all required: %+v", fx.File, fx)
	case !strings.Contains(fx.File, "-"+fx.Release+"-"):
		return fmt.Errorf("fixture %s: the file name does not carry its release %s", fx.File, fx.Release)
	}
	return nil
}

// plainName reports whether file is a file name (no directory) ending in .json.gz.
func plainName(file string) bool {
	return file != "" && filepath.Base(file) == file && strings.HasSuffix(file, ".json.gz")
}

// writeFile replaces a file whole: readers never see half of it.
func writeFile(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// mu and the lock file keep recorders that run at the same time, in one test
// process or in several (go test runs packages in parallel), from losing each
// other's manifest entries.
var mu sync.Mutex

func lock(dir string) (unlock func(), err error) {
	mu.Lock()
	path := filepath.Join(dir, ManifestFile+".lock")
	for deadline := time.Now().Add(time.Minute); ; {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err == nil {
			f.Close()
			return func() { os.Remove(path); mu.Unlock() }, nil
		}
		if !errors.Is(err, fs.ErrExist) || time.Now().After(deadline) {
			mu.Unlock()
			return nil, fmt.Errorf("locking the manifest (remove %s if no recorder is running): %w", path, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
