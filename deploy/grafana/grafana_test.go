package grafana_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/entityflow/entityflow/deploy/grafana"
	"github.com/entityflow/entityflow/deploy/metricscheck"
)

// The committed dashboards are exactly what the generator writes: nobody
// edits their JSON by hand, and a change to the Go code comes with its JSON.
func TestCommittedDashboardsAreGenerated(t *testing.T) {
	want, err := grafana.Render()
	if err != nil {
		t.Fatal(err)
	}
	committed, err := filepath.Glob(filepath.Join("dashboards", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, path := range committed {
		names = append(names, filepath.Base(path))
	}
	var generated []string
	for name := range want {
		generated = append(generated, name)
	}
	slices.Sort(generated)
	if !slices.Equal(names, generated) {
		t.Fatalf("dashboards/ holds %v, the generator writes %v: run make dashboards", names, generated)
	}
	for _, name := range generated {
		got, err := os.ReadFile(filepath.Join("dashboards", name))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want[name]) {
			t.Errorf("dashboards/%s differs from what the generator writes: run make dashboards (never edit the JSON by hand)", name)
		}
	}
}

// Write leaves the folder holding exactly the dashboards: a dashboard no
// longer generated is removed, anything else is left alone.
func TestWriteReplacesTheFolder(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"entityflow-retired.json", "README.md"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := grafana.Write(dir); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	want := []string{"README.md"}
	for _, s := range grafana.All() {
		want = append(want, s.File)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("folder holds %v, want %v", got, want)
	}
}

// dashboard is the part of a dashboard's JSON these tests read.
type dashboard struct {
	UID        string   `json:"uid"`
	Title      string   `json:"title"`
	Tags       []string `json:"tags"`
	Panels     []panel  `json:"panels"`
	Templating struct {
		List []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"list"`
	} `json:"templating"`
}

// panel is a panel or a row.
type panel struct {
	ID          int    `json:"id"`
	Type        string `json:"type"`
	Title       string `json:"title"`
	Description string `json:"description"`
	Datasource  struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr       string `json:"expr"`
		Datasource struct {
			UID string `json:"uid"`
		} `json:"datasource"`
	} `json:"targets"`
}

// Every dashboard is on the datasource variable, has the job and instance
// variables and the entityflow tag, and every panel has a title, a
// description of what it shows and what good looks like, and queries on the
// datasource variable whose metric names the PromQL parser can tell.
func TestDashboardsAreComplete(t *testing.T) {
	files, err := grafana.Render()
	if err != nil {
		t.Fatal(err)
	}
	uids := map[string]string{}
	for name, data := range files {
		t.Run(name, func(t *testing.T) {
			var d dashboard
			if err := json.Unmarshal(data, &d); err != nil {
				t.Fatal(err)
			}
			if other, ok := uids[d.UID]; ok || d.UID == "" {
				t.Errorf("uid %q empty or also %s's", d.UID, other)
			}
			uids[d.UID] = name
			if !slices.Contains(d.Tags, grafana.Tag) {
				t.Errorf("tags %v lack %q", d.Tags, grafana.Tag)
			}
			variables := map[string]string{}
			for _, v := range d.Templating.List {
				variables[v.Name] = v.Type
			}
			for name, typ := range map[string]string{"datasource": "datasource", "job": "query", "instance": "query"} {
				if variables[name] != typ {
					t.Errorf("variable %s is %q, want a %s variable", name, variables[name], typ)
				}
			}
			ids := map[int]bool{}
			panels := 0
			for _, p := range d.Panels {
				if ids[p.ID] {
					t.Errorf("panel id %d twice", p.ID)
				}
				ids[p.ID] = true
				if p.Type == "row" {
					continue
				}
				panels++
				if p.Title == "" || !strings.Contains(p.Description, "Good:") {
					t.Errorf("panel %q: every panel needs a title and a description saying what good looks like, got %q", p.Title, p.Description)
				}
				if p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
					t.Errorf("panel %q: datasource %q with %d queries, want ${datasource} and at least one", p.Title, p.Datasource.UID, len(p.Targets))
				}
				for _, target := range p.Targets {
					if target.Datasource.UID != "${datasource}" {
						t.Errorf("panel %q: a query on datasource %q", p.Title, target.Datasource.UID)
					}
				}
			}
			if panels == 0 {
				t.Error("no panel")
			}
			queries, err := metricscheck.DashboardQueries(name, data)
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range queries {
				if names, err := metricscheck.MetricNames(q.Expr); err != nil || len(names) == 0 {
					t.Errorf("%s: metric names %v, error %v", q.Where, names, err)
				}
			}
		})
	}
}
