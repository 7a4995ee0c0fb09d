package reproduction

import (
	"math"
)

// Event is the cluster after one pod's attempt: GPU milli allocated and cumulative
// GPU milli demand arrived.
type Event struct {
	Allocated, Arrived int64
}

// Curve is the paper's GPU allocation ratio curve: Curve[x] is the mean share of GPU
// capacity allocated (percent, 2 decimals) when arrived demand is x % of capacity,
// for x = 0..InflationPercent.
type Curve []float64

// NewCurve bins events the way the paper's analysis does: each event falls in bin
// round(A/cap·100) (half to even) with value round(U/cap·100, 2); a point is the mean
// of its bin, or of bins x−1..x+1 when its own is empty, rounded to 2 places. Without
// GPU capacity every point is NaN: no share of nothing is allocated.
func NewCurve(events []Event, capacity int64) Curve {
	if capacity <= 0 {
		events = nil
	}
	unit := float64(capacity) / 100
	sums := make([]float64, InflationPercent+2)
	counts := make([]int, InflationPercent+2)
	for _, e := range events {
		a := int(math.RoundToEven(float64(e.Arrived) / unit))
		if a < 0 || a > InflationPercent+1 {
			continue
		}
		sums[a] += round2(float64(e.Allocated) / unit)
		counts[a]++
	}
	c := make(Curve, InflationPercent+1)
	for x := range c {
		if counts[x] > 0 {
			c[x] = round2(sums[x] / float64(counts[x]))
			continue
		}
		var s float64
		var n int
		for y := max(0, x-1); y <= x+1; y++ {
			s += sums[y]
			n += counts[y]
		}
		if n > 0 {
			c[x] = round2(s / float64(n))
		} else {
			c[x] = math.NaN()
		}
	}
	return c
}

// round2 rounds to two decimals, half to even like Python's round.
func round2(v float64) float64 { return math.RoundToEven(v*100) / 100 }

// At130 is the headline figure.
func (c Curve) At130() float64 { return c[InflationPercent] }

// MeanCurve averages curves point by point (rounded to 2 places).
func MeanCurve(cs []Curve) Curve {
	if len(cs) == 0 {
		return nil
	}
	out := make(Curve, len(cs[0]))
	for x := range out {
		var s float64
		for _, c := range cs {
			s += c[x]
		}
		out[x] = s / float64(len(cs))
	}
	return out
}
