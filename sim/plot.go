package sim

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"

	"github.com/gpudra/gpudra/sim/reproduction"
)

// palette is one colour per policy, in reproduction.PolicyNames order, then the upper bound's.
var palette = []string{"#888888", "#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#2ca02c", "#e377c2", "#d62728", "#000000"}

// WriteSVG plots the mean allocation ratio vs arrived demand of each row (one line per
// row, meant for one trace and mode), like the paper's figures, with the region above
// 100 % demand magnified in an inset on the right.
func WriteSVG(w io.Writer, title string, rows []Row) error {
	const (
		width, height = 900, 460
		left, top     = 60, 40
		plotW, plotH  = 480, 360
		insetL        = 620
		insetW        = 240
	)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15">%s</text>`+"\n", left, html.EscapeString(title))

	// Inset range: the lowest value any curve reaches between 100 and 130, rounded down.
	lo := 100.0
	for _, r := range rows {
		for x := 100; x < len(r.Curve); x++ {
			if !math.IsNaN(r.Curve[x]) {
				lo = math.Min(lo, r.Curve[x])
			}
		}
	}
	lo = min(math.Floor(lo/2)*2, 98) // a range even when no curve has a point there
	panels := []struct {
		x0, w          float64
		xmin, xmax     float64
		ymin, ymax     float64
		xticks, yticks []float64
	}{
		{left, plotW, 0, reproduction.InflationPercent, 0, 100, ticks(0, 130, 10), ticks(0, 100, 10)},
		{insetL, insetW, 100, reproduction.InflationPercent, lo, 100, ticks(100, 130, 10), ticks(lo, 100, 2)},
	}
	for _, p := range panels {
		sx := func(v float64) float64 { return p.x0 + (v-p.xmin)/(p.xmax-p.xmin)*p.w }
		sy := func(v float64) float64 { return top + plotH - (v-p.ymin)/(p.ymax-p.ymin)*plotH }
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="none" stroke="#333"/>`+"\n", p.x0, top, p.w, plotH)
		for _, t := range p.xticks {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/><text x="%.1f" y="%d" text-anchor="middle">%g</text>`+"\n", sx(t), top, sx(t), top+plotH, sx(t), top+plotH+16, t)
		}
		for _, t := range p.yticks {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/><text x="%.1f" y="%.1f" text-anchor="end">%g</text>`+"\n", p.x0, sy(t), p.x0+p.w, sy(t), p.x0-4, sy(t)+4, t)
		}
		for _, r := range rows {
			var pts []string
			for x, v := range r.Curve {
				if float64(x) < p.xmin || math.IsNaN(v) {
					continue
				}
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", sx(float64(x)), sy(math.Max(v, p.ymin))))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.8" points="%s"/>`+"\n", colour(r.Policy), strings.Join(pts, " "))
		}
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">arrived GPU demand (%% of capacity)</text>`+"\n", left+plotW/2, top+plotH+34)
	fmt.Fprintf(&b, `<text transform="translate(16,%d) rotate(-90)" text-anchor="middle">GPU allocation ratio (%%)</text>`+"\n", top+plotH/2)
	// Legend, inside the main panel (its lower right is empty: curves start at the origin).
	for k, r := range rows {
		y := top + plotH - 20 - 16*(len(rows)-1-k)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/><text x="%d" y="%d">%s %s</text>`+"\n",
			left+plotW-200, y, left+plotW-180, y, colour(r.Policy), left+plotW-174, y+4, html.EscapeString(r.Policy), Percent(r.Mean))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func colour(policy string) string { return palette[policyOrder(policy)%len(palette)] }

func ticks(from, to, step float64) []float64 {
	var out []float64
	for v := from; v <= to+1e-9; v += step {
		out = append(out, v)
	}
	return out
}
