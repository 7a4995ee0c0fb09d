package deployments_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gpudra/gpudra/internal/buildinfo"
	plugin "github.com/gpudra/gpudra/kubeletplugin"
	"github.com/gpudra/gpudra/queueing/admission"
)

// dashboardFile is the Grafana dashboard the chart ships (metrics.grafanaDashboard).
var dashboardFile = filepath.Join("helm", "gpudra", "dashboards", "gpudra.json")

type dashboardPanel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"` // a collapsed row's
}

type dashboard struct {
	UID           string           `json:"uid"`
	Title         string           `json:"title"`
	SchemaVersion int              `json:"schemaVersion"`
	Panels        []dashboardPanel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Definition string          `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

// exportedMetrics are the names of the metrics gpudra serves: the kubelet plugin's, the
// controller's (the admission check and the capacity gauges) and gpudra_build_info, which
// every component serves; and up, which Prometheus records for each target.
func exportedMetrics() map[string]bool {
	out := map[string]bool{buildinfo.MetricName: true, "up": true}
	for _, n := range slices.Concat(plugin.MetricNames(), admission.MetricNames()) {
		out[n] = true
	}
	return out
}

var (
	promString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	promMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promRange    = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	grafanaVar   = regexp.MustCompile(`\$\{[^}]*\}|\$\w+`)
	promIdent    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	promKeywords = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset", "inf", "nan"}
)

// queryMetrics are the metric names a PromQL expression selects: what is left of it
// without strings, label matchers, ranges, grouping labels, Grafana variables, function
// and aggregation names (an identifier before "(") and keywords.
func queryMetrics(expr string) []string {
	s := promString.ReplaceAllString(expr, `""`)
	s = promMatchers.ReplaceAllString(s, " ")
	s = promRange.ReplaceAllString(s, " ")
	s = promGrouping.ReplaceAllString(s, " ")
	s = grafanaVar.ReplaceAllString(s, " ")
	var out []string
	for _, loc := range promIdent.FindAllStringIndex(s, -1) {
		if loc[0] > 0 && strings.ContainsAny(s[loc[0]-1:loc[0]], "0123456789.") {
			continue // the exponent or tail of a number (1e3)
		}
		name := s[loc[0]:loc[1]]
		if strings.HasPrefix(strings.TrimSpace(s[loc[1]:]), "(") || slices.Contains(promKeywords, strings.ToLower(name)) {
			continue
		}
		out = append(out, name)
	}
	return out
}

// exported says whether the series name is an exported metric's; a histogram's _bucket,
// _sum and _count series map to its base name.
func exported(names map[string]bool, series string) bool {
	if names[series] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(series, suffix); ok && names[base] {
			return true
		}
	}
	return false
}

func TestQueryMetrics(t *testing.T) {
	for expr, want := range map[string][]string{
		`histogram_quantile(0.99, sum by (le, type) (rate(a_seconds_bucket{node=~"$node", x="a b(c)"}[$__rate_interval])))`: {"a_seconds_bucket"},
		`1 - sum(max by (node) (a{node=~"$node"})) / sum(b) > 0`:                                                            {"a", "b"},
		`x * on (node, gpu) group_left(model) y and z offset 5m unless up`:                                                  {"x", "y", "z", "up"},
		`count(a == bool 1e3)`: {"a"},
	} {
		if got := queryMetrics(expr); !slices.Equal(got, want) {
			t.Errorf("queryMetrics(%s) = %v, want %v", expr, got, want)
		}
	}
}

// TestDashboardQueriesExportedMetrics: the chart's dashboard is Grafana dashboard JSON whose
// every panel queries Prometheus, and every metric its queries name is one gpudra exports.
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	var d dashboard
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.UID == "" || d.Title == "" || d.SchemaVersion == 0 {
		t.Errorf("%s: uid %q, title %q, schemaVersion %d; a Grafana dashboard has all three", dashboardFile, d.UID, d.Title, d.SchemaVersion)
	}
	names := exportedMetrics()
	used := map[string]bool{}
	check := func(where, expr string) {
		metrics := queryMetrics(expr)
		if len(metrics) == 0 {
			t.Errorf("%s: query %q names no metric", where, expr)
		}
		for _, m := range metrics {
			if !exported(names, m) {
				t.Errorf("%s: query %q names %s, which no gpudra component exports", where, expr, m)
			}
			used[m] = true
		}
	}
	ids := map[int]bool{}
	var walk func([]dashboardPanel)
	panels := 0
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel %q: id %d is not unique", p.Title, p.ID)
			}
			ids[p.ID] = true
			if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("panel %q: gridPos %+v is off Grafana's 24-column grid", p.Title, p.GridPos)
			}
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			panels++
			if p.Title == "" || p.Type == "" {
				t.Errorf("panel %d: type %q, title %q; want both", p.ID, p.Type, p.Title)
			}
			if p.Datasource == nil || p.Datasource.Type != "prometheus" {
				t.Errorf("panel %q: datasource %+v, want the Prometheus data source", p.Title, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no targets", p.Title)
			}
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" || tg.RefID == "" {
					t.Errorf("panel %q: target %q has no expr", p.Title, tg.RefID)
					continue
				}
				check("panel "+p.Title, tg.Expr)
			}
		}
	}
	walk(d.Panels)
	if panels == 0 {
		t.Fatal("the dashboard has no panels")
	}
	labelValues := regexp.MustCompile(`^label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*,`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: definition %q, want label_values(<metric>, <label>)", v.Name, v.Definition)
			continue
		}
		check("variable "+v.Name, m[1])
	}
	// What the dashboard is for: free whole GPUs, per-GPU allocation, shares, MIG mode,
	// prepare latency, admission decisions, health.
	for _, want := range []string{"gpudra_node_gpus_free", "gpudra_plugin_gpu_claims", "gpudra_plugin_gpu_info",
		"gpudra_plugin_gpu_share_memory_bytes", "gpudra_plugin_gpu_share_compute_percent", "gpudra_plugin_prepare_seconds_bucket",
		"gpudra_admission_decisions_total", "gpudra_plugin_unhealthy_gpus", "gpudra_plugin_health_events_total"} {
		if !used[want] {
			t.Errorf("no panel queries %s", want)
		}
	}
}

// TestExportedMetricNames: the registries the dashboard test reads list the metrics each
// component serves.
func TestExportedMetricNames(t *testing.T) {
	names := exportedMetrics()
	for _, want := range []string{"gpudra_plugin_prepare_seconds", "gpudra_plugin_gpu_claims", "gpudra_admission_decisions_total", "gpudra_node_gpus_free", "gpudra_nvlink_group_free", "gpudra_build_info"} {
		if !names[want] {
			t.Errorf("exported metrics lack %s", want)
		}
	}
	if !exported(names, "gpudra_plugin_prepare_seconds_bucket") || exported(names, "gpudra_plugin_prepare_bucket") {
		t.Error("a histogram's _bucket series maps to its base name, and only to an exported one")
	}
}
