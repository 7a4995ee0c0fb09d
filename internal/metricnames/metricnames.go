// Package metricnames lists the names of the metrics Prometheus collectors describe.
package metricnames

import (
	"regexp"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// fqName is the metric's name in a Desc's String form (Desc has no accessor for it).
var fqName = regexp.MustCompile(`^Desc\{fqName: "([^"]+)"`)

// Of returns the sorted, distinct names of the metrics the collectors describe (Describe:
// no values needed, vectors without children included).
func Of(cs ...prometheus.Collector) []string {
	ch := make(chan *prometheus.Desc)
	go func() {
		for _, c := range cs {
			c.Describe(ch)
		}
		close(ch)
	}()
	var out []string
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			out = append(out, m[1])
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
