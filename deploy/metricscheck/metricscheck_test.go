package metricscheck_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/entityflow/entityflow/deploy/metricscheck"
)

func TestMetricNames(t *testing.T) {
	tests := []struct {
		name, expr string
		want       []string
		err        string
	}{
		{"a counter's rate under Grafana's variables", `sum by (route) (rate(http_requests_total{job=~"$job", instance=~"${instance}"}[$__rate_interval]))`,
			[]string{"http_requests_total"}, ""},
		{"a histogram's buckets", `histogram_quantile(0.99, sum by (le) (rate(x_seconds_bucket[$__interval])))`, []string{"x_seconds_bucket"}, ""},
		{"both sides of a ratio, each once", `sum(rate(a_total[5m])) / (sum(rate(a_total[5m])) + sum(rate(b_total[5m])))`, []string{"a_total", "b_total"}, ""},
		{"a name matcher", `{__name__="up", job="x"}`, []string{"up"}, ""},
		{"a subquery and offset", `max_over_time(g[1h:5m] offset 1d)`, []string{"g"}, ""},
		{"a recorded series", `job:errors:ratio_rate5m > (14.4 * 0.001)`, []string{"job:errors:ratio_rate5m"}, ""},
		{"label_replace's ${1} is no variable", `label_replace(x, "class", "${1}xx", "code", "([0-9])..")`, []string{"x"}, ""},
		{"the range in a stat", `increase(z_total[$__range])`, []string{"z_total"}, ""},
		{"no metric name", `rate({job="x"}[5m])`, nil, "names no metric"},
		{"a name regex", `{__name__=~"http_.*"}`, nil, "names no metric"},
		{"an unknown built-in", `rate(x[$__unknown])`, nil, "unknown Grafana built-in"},
		{"not PromQL", `sum(rate(x[5m])`, nil, "parsing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := metricscheck.MetricNames(tc.expr)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("names %v, want %v", got, tc.want)
			}
		})
	}
}

func TestExported(t *testing.T) {
	const exposition = `# HELP req_total Requests.
# TYPE req_total counter
req_total{code="200"} 3
# HELP lat_seconds Latency.
# TYPE lat_seconds histogram
lat_seconds_bucket{le="0.1"} 1
lat_seconds_bucket{le="+Inf"} 1
lat_seconds_sum 0.05
lat_seconds_count 1
# HELP gc_seconds GC pauses.
# TYPE gc_seconds summary
gc_seconds{quantile="0.5"} 0.001
gc_seconds_sum 0.002
gc_seconds_count 2
# HELP empty_total Declared, never observed.
# TYPE empty_total counter
plain_gauge 7
`
	got, err := metricscheck.Exported(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"gc_seconds", "gc_seconds_count", "gc_seconds_sum", "lat_seconds_bucket", "lat_seconds_count", "lat_seconds_sum",
		"plain_gauge", "req_total"}
	if names := slices.Sorted(maps.Keys(got)); !slices.Equal(names, want) {
		t.Errorf("exported %v, want %v", names, want)
	}
}

func TestDashboardQueries(t *testing.T) {
	const dashboard = `{
  "panels": [
    {"type": "stat", "title": "A", "targets": [{"refId": "A", "expr": "sum(a_total)"}]},
    {"type": "row", "title": "R", "panels": [
      {"type": "timeseries", "title": "B", "targets": [{"refId": "A", "expr": "b"}, {"refId": "B", "expr": ""}]}
    ]}
  ],
  "templating": {"list": [
    {"name": "datasource", "type": "datasource", "query": "prometheus"},
    {"name": "job", "type": "query", "query": "label_values(c_total, job)"},
    {"name": "instance", "type": "query", "query": {"query": "label_values(c_total{job=~\"$job\"}, instance)", "refId": "X"}}
  ]}
}`
	got, err := metricscheck.DashboardQueries("d.json", []byte(dashboard))
	if err != nil {
		t.Fatal(err)
	}
	want := []metricscheck.Query{
		{Where: `d.json: panel "A", query A`, Expr: "sum(a_total)"},
		{Where: `d.json: panel "B", query A`, Expr: "b"},
		{Where: "d.json: variable job", Expr: "c_total"},
		{Where: "d.json: variable instance", Expr: `c_total{job=~"$job"}`},
	}
	if !slices.Equal(got, want) {
		t.Errorf("queries\n%v\nwant\n%v", got, want)
	}
	if _, err := metricscheck.DashboardQueries("v.json", []byte(`{"templating": {"list": [{"name": "v", "type": "query", "query": "query_result(x)"}]}}`)); err == nil {
		t.Error("a variable query other than label_values was taken")
	}
}

func TestRuleQueries(t *testing.T) {
	tests := []struct {
		name, file string
		want       []metricscheck.Query
		recorded   []string
		err        string
	}{
		{"a rule file", `groups:
  - name: g
    rules:
      - record: job:x:rate5m
        expr: sum by (job) (rate(x_total[5m]))
      - alert: XHigh
        expr: job:x:rate5m > 1
        for: 5m
`, []metricscheck.Query{
			{Where: "f.yml: group g, rule job:x:rate5m", Expr: "sum by (job) (rate(x_total[5m]))"},
			{Where: "f.yml: group g, rule XHigh", Expr: "job:x:rate5m > 1"},
		}, []string{"job:x:rate5m"}, ""},
		{"a promtool unit test file", `rule_files: [f.yml]
tests:
  - interval: 1m
    input_series: []
`, nil, nil, ""},
		{"an invalid expression", `groups:
  - name: g
    rules:
      - alert: Broken
        expr: sum(
`, nil, nil, "parse error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, recorded, err := metricscheck.RuleQueries("f.yml", []byte(tc.file))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) || !slices.Equal(recorded, tc.recorded) {
				t.Errorf("queries %v, recorded %v; want %v, %v", got, recorded, tc.want, tc.recorded)
			}
		})
	}
}
