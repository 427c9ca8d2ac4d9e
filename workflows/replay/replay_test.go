package replay_test

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/entityflow/entityflow/internal/testkit/histories"
	"github.com/entityflow/entityflow/internal/testkit/testenv"
	"github.com/entityflow/entityflow/internal/testkit/testlog"
	"github.com/entityflow/entityflow/workflows/platform"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// fixtureDir, workflows/testdata, holds the recorded histories of every
// domain and their manifest; this package replays them all, so it is the
// one place the fixtures are read against both domains' registrations.
var fixtureDir = filepath.Join("..", "testdata")

// TestReplayRecordedHistories replays every history recorded from a real server
// (testdata/*.json.gz, listed in testdata/manifest.json, written by `make
// histories`) against today's workflow code, each under its recorded workflow
// ID. A failure means a change is not deterministic for runs already in
// flight: put it behind workflow.GetVersion.
func TestReplayRecordedHistories(t *testing.T) {
	m, err := histories.ReadManifest(fixtureDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Validate(); err != nil {
		t.Fatalf("testdata/manifest.json: %v", err)
	}
	if len(m.Fixtures) == 0 {
		t.Fatal("testdata/manifest.json lists no recorded histories; run `make histories`")
	}
	listed := map[string]bool{}
	for _, fx := range m.Fixtures {
		listed[fx.File] = true
	}
	retired := map[string]bool{}
	for _, r := range m.Retired {
		retired[r.File] = true
	}
	entries, err := os.ReadDir(fixtureDir)
	if err != nil {
		t.Fatal(err)
	}
	sizes := map[string]int64{}
	for _, e := range entries {
		switch name := e.Name(); {
		case name == histories.ManifestFile:
		case retired[name]:
			t.Errorf("testdata/%s is retired in testdata/manifest.json: delete it", name)
		case !listed[name]:
			t.Errorf("testdata/%s is not in testdata/manifest.json: list it (histories.Write does) or delete it", name)
		default:
			info, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			sizes[name] = info.Size()
		}
	}
	t.Log(summary(m, sizes))
	logger := testlog.Logger(t)
	for _, fx := range m.Fixtures {
		t.Run(fx.File, func(t *testing.T) {
			hist, err := histories.Read(fixtureDir, fx.File)
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
			rewards.Register(r)
			platform.Register(r)
			err = r.ReplayWorkflowHistoryWithOptions(logger, hist, worker.ReplayWorkflowHistoryOptions{
				OriginalExecution: workflow.Execution{ID: fx.WorkflowID},
			})
			if err != nil {
				t.Fatalf("replaying %s (%s, release %s, from %s): %v", fx.File, fx.WorkflowID, fx.Release, fx.Scenario, err)
			}
		})
	}
}

// summary says in one line how many fixtures each workflow type has per
// release and what the fixture files weigh (sizes, by file name).
func summary(m histories.Manifest, sizes map[string]int64) string {
	counts := map[string]map[string]int{}
	for _, fx := range m.Fixtures {
		if counts[fx.WorkflowType] == nil {
			counts[fx.WorkflowType] = map[string]int{}
		}
		counts[fx.WorkflowType][fx.Release]++
	}
	var total int64
	for _, n := range sizes {
		total += n
	}
	var types []string
	for _, typ := range slices.Sorted(maps.Keys(counts)) {
		var rels []string
		for _, rel := range slices.SortedFunc(maps.Keys(counts[typ]), compareReleases) {
			rels = append(rels, fmt.Sprintf("%s %d", rel, counts[typ][rel]))
		}
		types = append(types, typ+" "+strings.Join(rels, ", "))
	}
	return fmt.Sprintf("replay set: %d fixtures, %d bytes compressed; %s", len(m.Fixtures), total, strings.Join(types, "; "))
}

// compareReleases orders release names v1, v2, ..., v10.
func compareReleases(a, b string) int {
	return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b))
}

// TestReplaySetNeverShrinks holds the replay set to every version of
// testdata/manifest.json committed to git: a fixture any of them listed must
// be listed now or retired (the manifest's "retired" list: file, date,
// reason), and every workflow type keeps a fixture of every release it ever
// had one of, unless all of those were retired. Without that history (no git,
// not a repository, a shallow clone) the test is skipped, and fails under
// REQUIRE_SERVICES=1 as in CI.
func TestReplaySetNeverShrinks(t *testing.T) {
	h, err := findManifestHistory(fixtureDir)
	testenv.Require(t, "the git history of testdata/manifest.json", err)
	previous, err := h.manifests()
	if err != nil {
		t.Fatal(err)
	}
	current, err := histories.ReadManifest(fixtureDir)
	if err != nil {
		t.Fatal(err)
	}
	lost := shrunk(previous, current)
	for _, file := range lost.fixtures {
		t.Errorf("%s was listed in an earlier testdata/manifest.json and is neither listed nor retired now: "+
			`restore it (git log -- %[2]s), or retire it deliberately by adding {"file": %[1]q, "date": "YYYY-MM-DD", "reason": "..."} to "retired"`,
			file, path.Join(path.Dir(h.path), file))
	}
	for _, tr := range lost.releases {
		t.Errorf("%s had fixtures of release %s and has none now: restore one, or retire all of them", tr.workflowType, tr.release)
	}
	t.Logf("%d committed versions of testdata/manifest.json checked", len(previous))
}

// typeRelease is a release of one workflow type.
type typeRelease struct{ workflowType, release string }

// shrinkage is what the current manifest lost against earlier versions.
type shrinkage struct {
	// fixtures lists the files an earlier version listed that the current
	// one neither lists nor retires, by name.
	fixtures []string
	// releases lists the releases a workflow type had a fixture of in an
	// earlier version and has none of in the current one, except those
	// whose every fixture the current one retires; by type, then release.
	releases []typeRelease
}

// shrunk compares the current manifest with earlier versions of it (in any
// order) and returns what it lost.
func shrunk(previous []histories.Manifest, current histories.Manifest) shrinkage {
	listed := map[string]bool{}
	have := map[typeRelease]bool{}
	for _, fx := range current.Fixtures {
		listed[fx.File] = true
		have[typeRelease{fx.WorkflowType, fx.Release}] = true
	}
	retired := map[string]bool{}
	for _, r := range current.Retired {
		retired[r.File] = true
	}
	gone := map[string]bool{}
	missing := map[typeRelease]bool{}
	for _, m := range previous {
		for _, fx := range m.Fixtures {
			if retired[fx.File] {
				continue
			}
			if !listed[fx.File] {
				gone[fx.File] = true
			}
			if tr := (typeRelease{fx.WorkflowType, fx.Release}); !have[tr] {
				missing[tr] = true
			}
		}
	}
	return shrinkage{
		fixtures: slices.Sorted(maps.Keys(gone)),
		releases: slices.SortedFunc(maps.Keys(missing), func(a, b typeRelease) int {
			return cmp.Or(strings.Compare(a.workflowType, b.workflowType), compareReleases(a.release, b.release))
		}),
	}
}

// TestReplaySetShrinkage shows that shrunk finds every loss the gate fails on,
// and nothing else.
func TestReplaySetShrinkage(t *testing.T) {
	fx := func(file, typ, release string) histories.Fixture {
		return histories.Fixture{File: file, WorkflowType: typ, Release: release}
	}
	manifest := func(fixtures ...histories.Fixture) histories.Manifest {
		return histories.Manifest{Fixtures: fixtures}
	}
	retire := func(m histories.Manifest, files ...string) histories.Manifest {
		for _, f := range files {
			m.Retired = append(m.Retired, histories.Retired{File: f, Date: "2027-01-15", Reason: "release 1 support removed: minSupported raised"})
		}
		return m
	}
	var (
		r1a = fx("rewards-v1-a.json.gz", "RewardsWorkflow", "v1")
		r1b = fx("rewards-v1-b.json.gz", "RewardsWorkflow", "v1")
		r2a = fx("rewards-v2-a.json.gz", "RewardsWorkflow", "v2")
		p1  = fx("platform-v1-run.json.gz", "RunActivityWorkflow", "v1")
		// r1a listed under another workflow type: its file stays, its release goes.
		r1aRetyped = fx("rewards-v1-a.json.gz", "RunActivityWorkflow", "v1")
		rewardsV1  = typeRelease{"RewardsWorkflow", "v1"}
	)
	for _, tc := range []struct {
		name     string
		previous []histories.Manifest
		current  histories.Manifest
		fixtures []string
		releases []typeRelease
	}{
		{"no history", nil, manifest(r1a), nil, nil},
		{"unchanged", []histories.Manifest{manifest(r1a, p1)}, manifest(r1a, p1), nil, nil},
		{"grown", []histories.Manifest{manifest(r1a), manifest(r1a, r1b)}, manifest(r1a, r1b, r2a, p1), nil, nil},
		{"a fixture dropped", []histories.Manifest{manifest(r1a, r1b)}, manifest(r1a), []string{r1b.File}, nil},
		{"a fixture dropped in an earlier version", []histories.Manifest{manifest(r1a, r1b), manifest(r1a)}, manifest(r1a, r2a), []string{r1b.File}, nil},
		{"a fixture retired", []histories.Manifest{manifest(r1a, r1b)}, retire(manifest(r1a), r1b.File), nil, nil},
		{"a retirement dropped", []histories.Manifest{manifest(r1a, r1b), retire(manifest(r1a), r1b.File)}, manifest(r1a), []string{r1b.File}, nil},
		{"a release dropped", []histories.Manifest{manifest(r1a, r1b, r2a, p1)}, manifest(r2a, p1), []string{r1a.File, r1b.File}, []typeRelease{rewardsV1}},
		{"a release dropped, another type keeps it", []histories.Manifest{manifest(r1a, p1)}, manifest(r1aRetyped, p1), nil, []typeRelease{rewardsV1}},
		{"a release retired", []histories.Manifest{manifest(r1a, r1b, r2a)}, retire(manifest(r2a), r1a.File, r1b.File), nil, nil},
		{"a release half retired", []histories.Manifest{manifest(r1a, r1b, r2a)}, retire(manifest(r2a), r1a.File), []string{r1b.File}, []typeRelease{rewardsV1}},
		{"everything dropped", []histories.Manifest{manifest(r1a, p1)}, manifest(), []string{p1.File, r1a.File}, []typeRelease{rewardsV1, {"RunActivityWorkflow", "v1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := shrunk(tc.previous, tc.current)
			if !slices.Equal(got.fixtures, tc.fixtures) {
				t.Errorf("lost fixtures %v, want %v", got.fixtures, tc.fixtures)
			}
			if !slices.Equal(got.releases, tc.releases) {
				t.Errorf("lost releases %v, want %v", got.releases, tc.releases)
			}
		})
	}
}

// manifestHistory names the committed versions of a fixture directory's manifest.
type manifestHistory struct {
	top  string   // the repository's top directory, where git runs
	path string   // the manifest's path from there
	revs []string // the commits that wrote it, newest first
}

// findManifestHistory finds the commits that wrote dir's manifest. It fails
// when there is no git, dir is in no repository, the repository is a shallow
// clone (its history is cut off), or no commit wrote the manifest.
func findManifestHistory(dir string) (manifestHistory, error) {
	out, err := git(dir, "rev-parse", "--is-shallow-repository", "--show-toplevel", "--show-prefix")
	if err != nil {
		return manifestHistory{}, err
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 3 {
		return manifestHistory{}, fmt.Errorf("git rev-parse in %s answered %q", dir, out)
	}
	h := manifestHistory{top: lines[1], path: path.Join(lines[2], histories.ManifestFile)}
	if lines[0] == "true" {
		return h, fmt.Errorf("%s is a shallow clone, without the earlier versions of %s (git fetch --unshallow)", h.top, h.path)
	}
	// Commits that deleted the manifest are left out: there is no version of
	// it to read there. (git 2.39 lists nothing for --diff-filter=d here.)
	out, err = git(h.top, "log", "--format=%H", "--diff-filter=ACMRT", "--", h.path)
	if err != nil {
		return h, err
	}
	h.revs = strings.Fields(out)
	if len(h.revs) == 0 {
		return h, fmt.Errorf("no commit in %s has %s", h.top, h.path)
	}
	return h, nil
}

// manifests reads every committed version of the manifest.
func (h manifestHistory) manifests() ([]histories.Manifest, error) {
	var ms []histories.Manifest
	for _, rev := range h.revs {
		out, err := git(h.top, "show", rev+":"+h.path)
		if err != nil {
			return nil, err
		}
		var m histories.Manifest
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			return nil, fmt.Errorf("reading %s as of %s: %w", h.path, rev, err)
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// git runs git in dir and returns what it printed.
func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
		return "", fmt.Errorf("git %s in %s: %w: %s", strings.Join(args, " "), dir, err, strings.TrimSpace(string(exit.Stderr)))
	}
	if err != nil {
		return "", fmt.Errorf("git %s in %s: %w", strings.Join(args, " "), dir, err)
	}
	return string(out), nil
}

// TestReplaySetNeverShrinksReadsEveryCommit runs the git side of the gate on
// a repository of its own: a fixture listed in one commit and dropped in the
// next is lost, though no single diff shows it against the current manifest,
// and a commit that deleted the manifest is passed over.
func TestReplaySetNeverShrinksReadsEveryCommit(t *testing.T) {
	_, err := exec.LookPath("git")
	testenv.Require(t, "git", err)
	repo := t.TempDir()
	dir := filepath.Join(repo, "workflows", "testdata")
	run := func(args ...string) {
		t.Helper()
		if _, err := git(repo, append([]string{"-c", "user.name=test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false"}, args...)...); err != nil {
			t.Fatal(err)
		}
	}
	commit := func(m *histories.Manifest, msg string) {
		t.Helper()
		if m == nil {
			run("rm", "-q", "workflows/testdata/"+histories.ManifestFile)
		} else if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		} else if err := histories.WriteManifest(dir, *m); err != nil {
			t.Fatal(err)
		}
		run("add", "-A")
		run("commit", "-q", "-m", msg)
	}
	fixture := func(file, release string) histories.Fixture {
		return histories.Fixture{File: file, WorkflowID: "rewards-c-1", WorkflowType: "RewardsWorkflow", Release: release, Scenario: "TestTiers"}
	}
	a, b, c := fixture("rewards-v1-a.json.gz", "v1"), fixture("rewards-v1-b.json.gz", "v1"), fixture("rewards-v2-c.json.gz", "v2")

	run("init", "-q")
	commit(&histories.Manifest{Fixtures: []histories.Fixture{a, b}}, "a and b")
	commit(&histories.Manifest{Fixtures: []histories.Fixture{a}}, "b dropped")
	commit(nil, "the manifest deleted")
	current := histories.Manifest{Fixtures: []histories.Fixture{a, c}}
	commit(&current, "c added")

	h, err := findManifestHistory(dir)
	if err != nil {
		t.Fatal(err)
	}
	previous, err := h.manifests()
	if err != nil {
		t.Fatal(err)
	}
	if len(previous) != 3 {
		t.Fatalf("read %d versions of the manifest, want 3", len(previous))
	}
	if lost := shrunk(previous, current); !slices.Equal(lost.fixtures, []string{b.File}) || len(lost.releases) != 0 {
		t.Fatalf("lost %+v, want fixture %s only", lost, b.File)
	}
}
