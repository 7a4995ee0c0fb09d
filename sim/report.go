package sim

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/gpudra/gpudra/sim/reproduction"
)

// Row is one trace × mode × policy over its seeds.
type Row struct {
	Trace, Policy string
	Mode          Mode
	Seeds         int
	// Mean, Std, Min and Max are of the value at 130 % over the seeds.
	Mean, Std, Min, Max float64
	// Published is the paper's figure (NaN when it has none).
	Published float64
	Curve     reproduction.Curve
	Refused   int
	Moved     int
	Failed    float64
	Wall      time.Duration // mean per seed
}

// Summarize groups runs by trace, mode and policy, in the order they first appear.
func Summarize(runs []Run) []Row {
	type key struct {
		trace, policy string
		mode          Mode
	}
	groups := map[key][]Run{}
	var order []key
	for _, r := range runs {
		k := key{r.Trace, r.Policy, r.Mode}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	out := make([]Row, 0, len(order))
	for _, k := range order {
		rs := groups[k]
		row := Row{Trace: k.trace, Policy: k.policy, Mode: k.mode, Seeds: len(rs), Min: math.Inf(1), Max: math.Inf(-1), Published: math.NaN()}
		if p, ok := reproduction.Published[k.trace][k.policy]; ok {
			row.Published = p
		}
		var curves []reproduction.Curve
		var wall time.Duration
		for _, r := range rs {
			v := r.Curve.At130()
			row.Mean += v / float64(len(rs))
			row.Min, row.Max = math.Min(row.Min, v), math.Max(row.Max, v)
			row.Refused += r.Refused
			row.Moved += r.Moved
			row.Failed += float64(r.Failed) / float64(len(rs))
			wall += r.Wall
			curves = append(curves, r.Curve)
		}
		for _, r := range rs {
			d := r.Curve.At130() - row.Mean
			row.Std += d * d / float64(len(rs))
		}
		row.Std = math.Sqrt(row.Std)
		row.Wall = wall / time.Duration(len(rs))
		row.Curve = reproduction.MeanCurve(curves)
		out = append(out, row)
	}
	return out
}

// WriteTable writes the 130 % table as CSV.
func WriteTable(w io.Writer, rows []Row) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"trace", "mode", "policy", "seeds", "mean_130", "std", "min", "max", "published", "diff", "allocator_refused", "gpu_moved_by_allocator", "failed_pods_mean", "wall_s_per_seed"})
	for _, r := range rows {
		pub, diff := "", ""
		if !math.IsNaN(r.Published) {
			pub, diff = f2(r.Published), f2(r.Mean-r.Published)
		}
		cw.Write([]string{r.Trace, string(r.Mode), r.Policy, strconv.Itoa(r.Seeds), f2(r.Mean), f2(r.Std), f2(r.Min), f2(r.Max), pub, diff,
			strconv.Itoa(r.Refused), strconv.Itoa(r.Moved), fmt.Sprintf("%.1f", r.Failed), fmt.Sprintf("%.2f", r.Wall.Seconds())})
	}
	cw.Flush()
	return cw.Error()
}

// WriteCurves writes every run's curve and each group's mean as CSV (long format).
func WriteCurves(w io.Writer, runs []Run, rows []Row) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"trace", "mode", "policy", "seed", "arrived_pct", "allocated_pct"})
	for _, r := range runs {
		for x, v := range r.Curve {
			cw.Write([]string{r.Trace, string(r.Mode), r.Policy, strconv.FormatInt(r.Seed, 10), strconv.Itoa(x), f2(v)})
		}
	}
	for _, r := range rows {
		for x, v := range r.Curve {
			cw.Write([]string{r.Trace, string(r.Mode), r.Policy, "mean", strconv.Itoa(x), f2(v)})
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteMarkdown writes the 130 % table for people: one line per trace and mode, one
// column per policy, the paper's figure beside ours where it has one.
func WriteMarkdown(w io.Writer, rows []Row) {
	type key struct {
		trace string
		mode  Mode
	}
	var keys []key
	var policies []string
	cell := map[key]map[string]Row{}
	for _, r := range rows {
		k := key{r.Trace, r.Mode}
		if cell[k] == nil {
			cell[k] = map[string]Row{}
			keys = append(keys, k)
		}
		if !contains(policies, r.Policy) {
			policies = append(policies, r.Policy)
		}
		cell[k][r.Policy] = r
	}
	sort.SliceStable(policies, func(i, j int) bool { return policyOrder(policies[i]) < policyOrder(policies[j]) })
	fmt.Fprint(w, "| trace | mode |")
	for _, p := range policies {
		fmt.Fprintf(w, " %s |", p)
	}
	fmt.Fprint(w, "\n|---|---|")
	for range policies {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	for _, k := range keys {
		fmt.Fprintf(w, "| %s | %s |", k.trace, k.mode)
		for _, p := range policies {
			r, ok := cell[k][p]
			switch {
			case !ok:
				fmt.Fprint(w, " |")
			case math.IsNaN(r.Published):
				fmt.Fprintf(w, " %s |", Percent(r.Mean))
			default:
				fmt.Fprintf(w, " %s (%.2f) |", Percent(r.Mean), r.Published)
			}
		}
		fmt.Fprintln(w)
	}
}

func policyOrder(p string) int {
	for k, n := range reproduction.PolicyNames {
		if n == p {
			return k
		}
	}
	return len(reproduction.PolicyNames)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Percent formats a share of GPU capacity with two decimals for people, "n/a" when
// there is none (NaN: a cluster without GPUs, a point no event reached).
func Percent(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return f2(v)
}

// f2 formats v with two decimals for CSV, empty when it is NaN.
func f2(v float64) string {
	if math.IsNaN(v) {
		return ""
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}
