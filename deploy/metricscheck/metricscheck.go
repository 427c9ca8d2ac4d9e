// Package metricscheck finds the metric names that entityflow's Grafana
// dashboards (deploy/grafana/dashboards) and Prometheus rule files
// (deploy/prometheus) query, and the names a /metrics endpoint exports, so
// that a test can hold the one to the other: a panel or a rule on a metric
// no program exports shows nothing and alerts on nothing, silently.
//
// Names are read with Prometheus's own parsers: PromQL (promql/parser),
// rule files (model/rulefmt) and the text exposition format (expfmt).
package metricscheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// Query is a PromQL expression and where it was found.
type Query struct {
	// Where names the file and the panel, variable or rule.
	Where string
	// Expr is the expression as written, Grafana's variables included.
	Expr string
}

// dashboardJSON is the part of a Grafana dashboard these checks read.
type dashboardJSON struct {
	Panels     []panelJSON `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// panelJSON is a panel, or a row with its collapsed panels.
type panelJSON struct {
	Title   string      `json:"title"`
	Panels  []panelJSON `json:"panels"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

// labelValues is the query of a Prometheus query variable that lists a
// label's values over the series of a selector.
var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)

// DashboardQueries returns the PromQL of a Grafana dashboard (file names it
// in Where): every panel's queries, those of panels inside rows included,
// and the selector of every query variable of the form
// label_values(selector, label).
func DashboardQueries(file string, data []byte) ([]Query, error) {
	var d dashboardJSON
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var out []Query
	var walk func(panels []panelJSON)
	walk = func(panels []panelJSON) {
		for _, p := range panels {
			for _, t := range p.Targets {
				if t.Expr != "" {
					out = append(out, Query{Where: fmt.Sprintf("%s: panel %q, query %s", file, p.Title, t.RefID), Expr: t.Expr})
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var text string
		if err := json.Unmarshal(v.Query, &text); err != nil {
			var object struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &object); err != nil {
				return nil, fmt.Errorf("%s: variable %s: query is neither a string nor an object with a query: %w", file, v.Name, err)
			}
			text = object.Query
		}
		match := labelValues.FindStringSubmatch(text)
		if match == nil {
			return nil, fmt.Errorf("%s: variable %s: %q is not label_values(selector, label)", file, v.Name, text)
		}
		out = append(out, Query{Where: fmt.Sprintf("%s: variable %s", file, v.Name), Expr: match[1]})
	}
	return out, nil
}

// RuleQueries returns the expression of every rule of a Prometheus rule
// file, and the names its recording rules record (which other rules may
// query though no program exports them). A file without groups, such as a
// promtool unit test file, gives none.
func RuleQueries(file string, data []byte) (queries []Query, recorded []string, err error) {
	groups, errs := rulefmt.Parse(data, true, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		return nil, nil, fmt.Errorf("%s: %w", file, errors.Join(errs...))
	}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			name := r.Alert
			if r.Record != "" {
				name = r.Record
				recorded = append(recorded, r.Record)
			}
			queries = append(queries, Query{Where: fmt.Sprintf("%s: group %s, rule %s", file, g.Name, name), Expr: r.Expr})
		}
	}
	return queries, recorded, nil
}

// grafanaDurations are Grafana's built-in interval variables, each replaced
// by a duration of its kind before parsing.
var grafanaDurations = map[string]string{
	"__rate_interval": "5m",
	"__interval":      "1m",
	"__range":         "1h",
	"__range_s":       "3600",
	"__range_ms":      "3600000",
	"__interval_ms":   "60000",
}

// grafanaVariable is a use of a Grafana variable: $name, ${name},
// ${name:format} or [[name]].
var grafanaVariable = regexp.MustCompile(`\$\{([a-zA-Z_][a-zA-Z0-9_]*)(?::[^}]*)?\}|\$([a-zA-Z_][a-zA-Z0-9_]*)|\[\[([a-zA-Z_][a-zA-Z0-9_]*)\]\]`)

// Substitute replaces Grafana's variables in expr so that PromQL parses it:
// the built-in intervals ($__rate_interval, $__range, ...) by a duration,
// a dashboard's own variables by ".*" (they stand in label matchers). An
// unknown built-in ($__ and a name Substitute does not know) is an error.
func Substitute(expr string) (string, error) {
	var unknown []string
	out := grafanaVariable.ReplaceAllStringFunc(expr, func(use string) string {
		match := grafanaVariable.FindStringSubmatch(use)
		name := match[1] + match[2] + match[3]
		if d, ok := grafanaDurations[name]; ok {
			return d
		}
		if strings.HasPrefix(name, "__") {
			unknown = append(unknown, name)
		}
		return ".*"
	})
	if len(unknown) > 0 {
		return "", fmt.Errorf("unknown Grafana built-in variables %v in %q", unknown, expr)
	}
	return out, nil
}

// MetricNames returns the metric names expr selects, sorted and each once,
// after Substitute. A selector without a metric name, or with one that is
// not an equality on __name__, is an error: its metrics cannot be told.
func MetricNames(expr string) ([]string, error) {
	text, err := Substitute(expr)
	if err != nil {
		return nil, err
	}
	ast, err := parser.NewParser(parser.Options{}).ParseExpr(text)
	if err != nil {
		return nil, fmt.Errorf("parsing %q: %w", text, err)
	}
	var names []string
	var bad error
	parser.Inspect(ast, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		if name == "" {
			for _, lm := range vs.LabelMatchers {
				if lm.Name == model.MetricNameLabel && lm.Type == labels.MatchEqual {
					name = lm.Value
				}
			}
		}
		if name == "" {
			bad = errors.Join(bad, fmt.Errorf("selector %s in %q names no metric", vs, expr))
			return nil
		}
		names = append(names, name)
		return nil
	})
	if bad != nil {
		return nil, bad
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// Exported returns the names of the series a /metrics response in the text
// exposition format holds: a counter's or gauge's name; a histogram's
// name_bucket, name_sum and name_count; a summary's name (its quantiles),
// name_sum and name_count. A family without a series exports nothing.
func Exported(r io.Reader) (map[string]bool, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing the exposition: %w", err)
	}
	out := map[string]bool{}
	for name, f := range families {
		if len(f.GetMetric()) == 0 {
			continue
		}
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			out[name+"_bucket"], out[name+"_sum"], out[name+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			out[name], out[name+"_sum"], out[name+"_count"] = true, true, true
		default:
			out[name] = true
		}
	}
	return out, nil
}

// PrometheusSeries are the series Prometheus itself writes for every scrape
// target and alert, which rules may query though no program exports them.
var PrometheusSeries = []string{
	"up", "scrape_duration_seconds", "scrape_samples_scraped", "scrape_samples_post_metric_relabeling",
	"scrape_series_added", "ALERTS", "ALERTS_FOR_STATE",
}
