// Package grafana builds entityflow's Grafana dashboards in Go, with the
// Grafana Foundation SDK, so that they are reviewed as code and their JSON
// (dashboards/*.json, what operators import) is only ever generated:
// `make dashboards` writes it, and a test fails when the committed files
// differ from what Render gives. One dashboard per area an on-call engineer
// looks at: the HTTP API, the rewards entities, the bus ingress, the change
// feed and the Temporal workers (docs/dashboards.md).
//
// Every dashboard takes its Prometheus data source from a datasource
// variable and narrows its series with job and instance variables, whose
// values are read from one of the dashboard's own metrics; every panel has
// a description saying what it shows and what good looks like.
package grafana

// The dashboards are Grafana's classic JSON model (schema v1), which every
// Grafana imports and provisions; the SDK marks its builders deprecated in
// favour of dashboardv2, the v2 schema of Grafana 12's dynamic dashboards.
//lint:file-ignore SA1019 the classic dashboard model is the one every Grafana imports (see above)

//go:generate go run ./cmd/gendashboards -out dashboards

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// Tag is the tag every dashboard carries; their links list the dashboards
// of this tag.
const Tag = "entityflow"

// Spec is one dashboard: the file it is written to and its panels.
type Spec struct {
	// File is the dashboard's file name under dashboards/.
	File string
	// board lays the dashboard out.
	board func() *board
}

// All returns every dashboard, in the order docs/dashboards.md describes them.
func All() []Spec {
	return []Spec{
		{"entityflow-api.json", apiDashboard},
		{"entityflow-entities.json", entitiesDashboard},
		{"entityflow-ingress.json", ingressDashboard},
		{"entityflow-change-feed.json", changeFeedDashboard},
		{"entityflow-workers.json", workersDashboard},
	}
}

// Render builds every dashboard and returns its JSON (indented, with a final
// newline), by file name.
func Render() (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, s := range All() {
		d, err := s.board().b.Build()
		if err != nil {
			return nil, fmt.Errorf("building %s: %w", s.File, err)
		}
		b, err := json.MarshalIndent(d, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("encoding %s: %w", s.File, err)
		}
		out[s.File] = append(b, '\n')
	}
	return out, nil
}

// Write renders every dashboard into dir and removes the JSON files there
// that no dashboard writes any more, so that dir holds exactly Render's
// files.
func Write(dir string) error {
	files, err := Render()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	old, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return fmt.Errorf("listing %s: %w", dir, err)
	}
	for _, path := range old {
		if _, ok := files[filepath.Base(path)]; !ok {
			if err := os.Remove(path); err != nil {
				return fmt.Errorf("removing the stale %s: %w", path, err)
			}
		}
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := os.WriteFile(filepath.Join(dir, name), files[name], 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", name, err)
		}
	}
	return nil
}

// datasource is the reference every panel and query uses: the dashboard's
// datasource variable.
func datasource() common.DataSourceRef {
	return common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}
}

// sel is the matcher of the job and instance variables, in every query.
const sel = `job=~"$job", instance=~"$instance"`

// m returns the selector of metric name narrowed to the chosen jobs and
// instances and by the further matchers given (`code=~"5.."`).
func m(name string, matchers ...string) string {
	return name + "{" + strings.Join(append([]string{sel}, matchers...), ", ") + "}"
}

// rateOf is the rate of a counter over Grafana's rate interval.
func rateOf(selector string) string { return "rate(" + selector + "[$__rate_interval])" }

// quantile is the phi-quantile of histogram name (its _bucket series) by
// the labels of by (none when empty), over the rate interval.
func quantile(phi, name, by string, matchers ...string) string {
	labels := "le"
	if by != "" {
		labels = by + ", le"
	}
	return "histogram_quantile(" + phi + ", sum by (" + labels + ") (" + rateOf(m(name+"_bucket", matchers...)) + "))"
}

// board builds one dashboard: its rows and panels in order, laid out by the
// SDK, with panel IDs numbered from 1 so that links to a panel stay stable.
type board struct {
	b      *dashboard.DashboardBuilder
	nextID uint32
}

// newBoard starts a dashboard. jobMetric is a metric every job the dashboard
// is about exports: the job and instance variables list the values of its
// series.
func newBoard(uid, title, description, jobMetric string) *board {
	b := dashboard.NewDashboardBuilder(title).
		Uid(uid).
		Description(description).
		Tags([]string{Tag}).
		Editable().
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Refresh("30s").
		Time("now-1h", "now").
		Timezone(common.TimeZoneBrowser).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").
			Label("Data source").
			Type("prometheus")).
		WithVariable(variable("job", "Job", "label_values("+jobMetric+", job)")).
		WithVariable(variable("instance", "Instance", "label_values("+withJob(jobMetric)+", instance)")).
		Link(dashboard.NewDashboardLinkBuilder("entityflow").
			Type(dashboard.DashboardLinkTypeDashboards).
			Tags([]string{Tag}).
			AsDropdown(true).
			KeepTime(true))
	return &board{b: b}
}

// variable is a query variable of the values of a label, any number of
// them, all by default.
func variable(name, label, query string) *dashboard.QueryVariableBuilder {
	return dashboard.NewQueryVariableBuilder(name).
		Label(label).
		Datasource(datasource()).
		Query(dashboard.StringOrMap{String: cog.ToPtr(query)}).
		Definition(query).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortAlphabeticalAsc).
		Multi(true).
		IncludeAll(true).
		Current(dashboard.VariableOption{
			Text:  dashboard.StringOrArrayOfString{ArrayOfString: []string{"All"}},
			Value: dashboard.StringOrArrayOfString{ArrayOfString: []string{"$__all"}},
		})
}

// withJob adds the job variable's matcher to selector, a metric name with
// or without matchers of its own.
func withJob(selector string) string {
	if name, rest, ok := strings.Cut(selector, "{"); ok {
		return name + `{job=~"$job", ` + rest
	}
	return selector + `{job=~"$job"}`
}

// row starts a row of panels.
func (d *board) row(title string) {
	d.nextID++
	d.b.WithRow(dashboard.NewRowBuilder(title).Id(d.nextID))
}

// query is one PromQL query of a panel and the legend of its series.
type query struct {
	expr, legend string
}

// q is a query with its legend.
func q(expr, legend string) query { return query{expr: expr, legend: legend} }

// targets returns the panel's queries, lettered A, B, ...
func targets(queries []query) []cog.Builder[variants.Dataquery] {
	out := make([]cog.Builder[variants.Dataquery], len(queries))
	for i, qu := range queries {
		out[i] = prometheus.NewDataqueryBuilder().
			Datasource(datasource()).
			RefId(string(rune('A' + i))).
			Expr(qu.expr).
			LegendFormat(qu.legend).
			Range()
	}
	return out
}

// series is a time series panel.
type series struct {
	title, description, unit string
	queries                  []query
	width                    uint32 // of 24; 12 when zero
	stacked                  bool   // stack the series (shares of one whole)
}

// graph adds a time series panel.
func (d *board) graph(p series) {
	d.nextID++
	width := p.width
	if width == 0 {
		width = 12
	}
	stacking := common.StackingModeNone
	if p.stacked {
		stacking = common.StackingModeNormal
	}
	d.b.WithPanel(timeseries.NewPanelBuilder().
		Id(d.nextID).
		Title(p.title).
		Description(p.description).
		Datasource(datasource()).
		Targets(targets(p.queries)).
		Unit(p.unit).
		Min(0).
		Span(width).
		Height(8).
		FillOpacity(10).
		Stacking(common.NewStackingConfigBuilder().Mode(stacking)).
		Legend(common.NewVizLegendOptionsBuilder().
			ShowLegend(true).
			DisplayMode(common.LegendDisplayModeTable).
			Placement(common.LegendPlacementBottom).
			Calcs([]string{"mean", "max", "lastNotNull"})))
}

// single is a stat panel: one number, coloured by thresholds.
type single struct {
	title, description, unit string
	query                    query
	// base colours the value below the first step: green when empty (a
	// number that is good when low), red for one that is good when high.
	base string
	// steps colour the value from each step's value on.
	steps []dashboard.Threshold
}

// step is a threshold of a stat panel.
func step(value float64, color string) dashboard.Threshold {
	return dashboard.Threshold{Value: cog.ToPtr(value), Color: color}
}

// stat adds a stat panel, a quarter of the width.
func (d *board) stat(p single) {
	d.nextID++
	base := p.base
	if base == "" {
		base = "green"
	}
	steps := append([]dashboard.Threshold{{Color: base}}, p.steps...)
	d.b.WithPanel(stat.NewPanelBuilder().
		Id(d.nextID).
		Title(p.title).
		Description(p.description).
		Datasource(datasource()).
		Targets(targets([]query{p.query})).
		Unit(p.unit).
		Span(6).
		Height(4).
		GraphMode(common.BigValueGraphModeArea).
		ColorMode(common.BigValueColorModeValue).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"})).
		Thresholds(dashboard.NewThresholdsConfigBuilder().
			Mode(dashboard.ThresholdsModeAbsolute).
			Steps(steps)))
}
