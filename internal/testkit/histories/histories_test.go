package histories

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"

	"github.com/entityflow/entityflow/workflows/rewards"
)

// history builds a history of a workflow of type typ with events of the given types.
func history(typ string, types ...enums.EventType) *historypb.History {
	h := &historypb.History{Events: []*historypb.HistoryEvent{{
		EventId:   1,
		EventType: enums.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
		Attributes: &historypb.HistoryEvent_WorkflowExecutionStartedEventAttributes{
			WorkflowExecutionStartedEventAttributes: &historypb.WorkflowExecutionStartedEventAttributes{
				WorkflowType: &commonpb.WorkflowType{Name: typ},
			},
		},
	}}}
	for i, t := range types {
		h.Events = append(h.Events, &historypb.HistoryEvent{EventId: int64(i + 2), EventType: t})
	}
	return h
}

func TestWriteCompressesAndListsInTheManifest(t *testing.T) {
	dir := t.TempDir()
	hist := history("RewardsWorkflow", enums.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED)
	fx := Fixture{File: FileName("rewards", "v2", "tiers-run1"), WorkflowID: "rewards-c-1", Release: "v2", Scenario: "TestTiers"}
	if err := Write(dir, fx, hist); err != nil {
		t.Fatal(err)
	}
	other := Fixture{File: FileName("platform", "v2", "run-event"), WorkflowID: "activity-a:e", Release: "v2", Scenario: "TestEvent"}
	if err := Write(dir, other, history("RunActivityWorkflow")); err != nil {
		t.Fatal(err)
	}
	m, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	fx.WorkflowType, other.WorkflowType = "RewardsWorkflow", "RunActivityWorkflow"
	if want := []Fixture{other, fx}; !slices.Equal(m.Fixtures, want) {
		t.Fatalf("manifest %+v, want %+v", m.Fixtures, want)
	}
	got, err := Read(dir, fx.File)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.GetEvents()) != 2 || WorkflowType(got) != "RewardsWorkflow" {
		t.Fatalf("read back %v", got)
	}
	raw, err := os.ReadFile(filepath.Join(dir, fx.File))
	if err != nil || len(raw) < 2 || raw[0] != 0x1f || raw[1] != 0x8b {
		t.Fatalf("%s is not gzip: % x, %v", fx.File, raw[:min(len(raw), 2)], err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 3 {
		t.Fatalf("the directory holds %d files, want 2 fixtures and the manifest (no lock or temporary file)", len(entries))
	}

	// Recording again under the same release replaces the entry.
	fx.WorkflowID = "rewards-c-2"
	if err := Write(dir, fx, hist); err != nil {
		t.Fatal(err)
	}
	if m, _ := ReadManifest(dir); len(m.Fixtures) != 2 || m.Fixtures[1].WorkflowID != "rewards-c-2" {
		t.Fatalf("manifest after a second recording: %+v", m.Fixtures)
	}
}

func TestWriteRefusesAnotherReleasesFile(t *testing.T) {
	dir := t.TempDir()
	hist := history("RewardsWorkflow")
	v1 := Fixture{File: "rewards-v1-tiers-run1.json.gz", WorkflowID: "rewards-c-1", Release: "v1", Scenario: "TestTiers"}
	if err := Write(dir, v1, hist); err != nil {
		t.Fatal(err)
	}
	for name, fx := range map[string]Fixture{
		"another release's file": {File: v1.File, WorkflowID: "rewards-c-1", Release: "v2", Scenario: "TestTiers"},
		"no scenario":            {File: "rewards-v2-x.json.gz", WorkflowID: "rewards-c-1", Release: "v2"},
		"not compressed":         {File: "rewards-v2-x.json", WorkflowID: "rewards-c-1", Release: "v2", Scenario: "s"},
		"a path":                 {File: "../rewards-v2-x.json.gz", WorkflowID: "rewards-c-1", Release: "v2", Scenario: "s"},
		"the wrong type":         {File: "rewards-v2-x.json.gz", WorkflowID: "rewards-c-1", WorkflowType: "Other", Release: "v2", Scenario: "s"},
	} {
		if err := Write(dir, fx, hist); err == nil {
			t.Errorf("%s: written", name)
		}
	}
	if m, _ := ReadManifest(dir); len(m.Fixtures) != 1 || m.Fixtures[0].Release != "v1" {
		t.Fatalf("manifest %+v", m.Fixtures)
	}
}

func TestNovelKeepsRunsThatShowSomethingNew(t *testing.T) {
	const (
		signaled = enums.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
		failed   = enums.EVENT_TYPE_WORKFLOW_TASK_FAILED
		timedOut = enums.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT
		can      = enums.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
		done     = enums.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
	)
	runs := []Run{
		{"1", history("W", signaled, failed, done, can)},
		{"2", history("W", signaled, done, can)},           // nothing new
		{"3", history("W", signaled, failed, done, can)},   // nothing new
		{"4", history("W", timedOut, done, can)},           // a timeout
		{"5", history("W", signaled, signaled, done, can)}, // nothing new
		{"6", history("W", signaled, done)},                // still open
	}
	var got []string
	for _, r := range Novel(runs) {
		got = append(got, r.RunID)
	}
	if want := []string{"1", "4", "6"}; !slices.Equal(got, want) {
		t.Fatalf("novel runs %v, want %v", got, want)
	}
}

func TestWriteKeepsTheRetiredList(t *testing.T) {
	dir := t.TempDir()
	retired := []Retired{{File: "rewards-v1-tiers-run1.json.gz", Date: "2027-01-15", Reason: "release 1 support removed: minSupported raised"}}
	if err := WriteManifest(dir, Manifest{Retired: retired}); err != nil {
		t.Fatal(err)
	}
	fx := Fixture{File: FileName("rewards", "v2", "tiers-run1"), WorkflowID: "rewards-c-1", Release: "v2", Scenario: "TestTiers"}
	if err := Write(dir, fx, history("RewardsWorkflow")); err != nil {
		t.Fatal(err)
	}
	m, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Fixtures) != 1 || !slices.Equal(m.Retired, retired) {
		t.Fatalf("manifest after a recording: %+v", m)
	}

	// A retired file is not recorded again.
	v1 := Fixture{File: retired[0].File, WorkflowID: "rewards-c-1", Release: "v1", Scenario: "TestTiers"}
	if err := Write(dir, v1, history("RewardsWorkflow")); err == nil {
		t.Fatal("a retired fixture was written again")
	}
	if _, err := os.Stat(filepath.Join(dir, v1.File)); err == nil {
		t.Fatalf("%s exists", v1.File)
	}
}

func TestWriteManifestListsAnEmptyRetiredList(t *testing.T) {
	dir := t.TempDir()
	if err := WriteManifest(dir, Manifest{}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	if want := "{\n  \"fixtures\": null,\n  \"retired\": []\n}\n"; string(data) != want {
		t.Fatalf("manifest %q, want %q", data, want)
	}
}

func TestValidate(t *testing.T) {
	fx := Fixture{File: "rewards-v2-tiers-run1.json.gz", WorkflowID: "rewards-c-1", WorkflowType: "RewardsWorkflow", Release: "v2", Scenario: "TestTiers"}
	ok := Retired{File: "rewards-v1-tiers-run1.json.gz", Date: "2027-01-15", Reason: "release 1 support removed"}
	for _, tc := range []struct {
		name string
		m    Manifest
		want string // in the error; "" for none
	}{
		{"empty", Manifest{}, ""},
		{"a fixture and a retirement", Manifest{Fixtures: []Fixture{fx}, Retired: []Retired{ok}}, ""},
		{"listed twice", Manifest{Fixtures: []Fixture{fx, fx}}, "listed twice"},
		{"incomplete fixture", Manifest{Fixtures: []Fixture{{File: fx.File, Release: "v2"}}}, "are all required"},
		{"retired twice", Manifest{Retired: []Retired{ok, ok}}, "retired twice"},
		{"both", Manifest{Fixtures: []Fixture{fx}, Retired: []Retired{{File: fx.File, Date: ok.Date, Reason: ok.Reason}}}, "both listed and retired"},
		{"no date", Manifest{Retired: []Retired{{File: ok.File, Reason: ok.Reason}}}, "not YYYY-MM-DD"},
		{"another date format", Manifest{Retired: []Retired{{File: ok.File, Date: "15/01/2027", Reason: ok.Reason}}}, "not YYYY-MM-DD"},
		{"no reason", Manifest{Retired: []Retired{{File: ok.File, Date: ok.Date, Reason: " "}}}, "a reason is required"},
		{"a path", Manifest{Retired: []Retired{{File: "../" + ok.File, Date: ok.Date, Reason: ok.Reason}}}, "plain name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.m.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// Fixtures recorded today are named after the release the rewards code runs.
func TestRewardsReleaseFollowsTheCode(t *testing.T) {
	if want := fmt.Sprintf("v%d", rewards.RewardsRelease); RewardsRelease != want {
		t.Fatalf("histories.RewardsRelease is %s, rewards.RewardsRelease says %s", RewardsRelease, want)
	}
}
