//go:build e2e

package e2e

import (
	"cmp"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The suite's tests run in two lanes at once, one test at a time in each, in the order they
// are written: the real nodes' lane (their kubelets, containerd, runc and plugins, which a
// test may restart, roll or kill) and the cluster's lane (the kwok nodes, Kueue and the
// controllers). The lanes share nothing a test asserts on: a real node carries a taint that
// only the real nodes' tests tolerate, every test has its own namespaces and ClusterQueues,
// and tests that list the whole cluster's devices filter them by node or vendor. Most of a
// test's time is spent waiting for controllers, so two lanes take about the time of the
// longer one.
//
// A test names its lane first thing (inLane). A test that names none runs alone, before both
// lanes start: one that disturbs the whole lab (the controller's leader is killed) must.
// GPUDRA_E2E_SERIAL=1 runs every test alone, in order.

// lane hands its tests their turn in the order they asked for it.
type lane struct {
	name   string
	mu     sync.Mutex
	turn   *sync.Cond
	issued int // tickets handed out
	next   int // the ticket whose turn it is
	ran    []ranTest
}

// ranTest is how long a test of a lane took once its turn came.
type ranTest struct {
	name  string
	start time.Time
	took  time.Duration
}

func newLane(name string) *lane {
	l := &lane{name: name}
	l.turn = sync.NewCond(&l.mu)
	return l
}

var (
	realNodeLane = newLane("real nodes")
	clusterLane  = newLane("cluster")
	serialSuite  = os.Getenv("GPUDRA_E2E_SERIAL") == "1"
)

// inLane runs the rest of t in lane l: it takes a ticket while the suite still starts its
// tests one after another (so tickets follow the source order), lets the suite go on
// (t.Parallel), and waits for the ticket's turn; the next test's turn comes when t ends.
func inLane(t *testing.T, l *lane) {
	t.Helper()
	if serialSuite {
		return
	}
	l.mu.Lock()
	ticket := l.issued
	l.issued++
	l.mu.Unlock()
	t.Parallel()
	l.mu.Lock()
	for l.next != ticket {
		l.turn.Wait()
	}
	l.mu.Unlock()
	start := time.Now()
	t.Cleanup(func() {
		l.mu.Lock()
		l.ran = append(l.ran, ranTest{t.Name(), start, time.Since(start)})
		l.next++
		l.mu.Unlock()
		l.turn.Broadcast()
	})
}

// allowLanes lets every test of both lanes be started at once (each then waits for its turn),
// so that the lanes never wait for a free slot of `go test -parallel`, whose default is the
// number of CPUs.
func allowLanes() {
	if serialSuite {
		return
	}
	if f := flag.Lookup("test.parallel"); f != nil {
		if n, err := strconv.Atoi(f.Value.String()); err == nil && n < 1000 {
			_ = f.Value.Set("1000")
		}
	}
}

// writeLaneTimes writes where the suite's time went to path: the lab's start-up, the tests
// that run alone before the lanes, and each lane's tests, longest first. The suite takes
// about as long as its longest lane after the first two, which is where to look when it grows.
func writeLaneTimes(path string, suiteStart, testsStart time.Time) error {
	lanes := []*lane{realNodeLane, clusterLane}
	ran := make([][]ranTest, len(lanes))
	lanesStart := time.Now()
	for i, l := range lanes {
		l.mu.Lock()
		ran[i] = slices.Clone(l.ran)
		l.mu.Unlock()
		for _, r := range ran[i] {
			if r.start.Before(lanesStart) {
				lanesStart = r.start
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "e2e suite: %s\n", time.Since(suiteStart).Round(time.Second))
	fmt.Fprintf(&b, "  %s  the lab's start-up and the suite's gpudra build\n", testsStart.Sub(suiteStart).Round(time.Second))
	fmt.Fprintf(&b, "  %s  the tests that run alone, before the lanes\n", lanesStart.Sub(testsStart).Round(time.Second))
	fmt.Fprintf(&b, "  %s  the lanes, side by side\n", time.Since(lanesStart).Round(time.Second))
	for i, l := range lanes {
		var sum time.Duration
		for _, r := range ran[i] {
			sum += r.took
		}
		slices.SortFunc(ran[i], func(a, b ranTest) int { return cmp.Compare(b.took, a.took) })
		fmt.Fprintf(&b, "\n%s lane: %d tests, %s\n", l.name, len(ran[i]), sum.Round(time.Second))
		for _, r := range ran[i] {
			fmt.Fprintf(&b, "  %7s  %s\n", r.took.Round(100*time.Millisecond), r.name)
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
