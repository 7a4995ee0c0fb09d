//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/gpudra/gpudra/lab"
)

// The chart's controller: its lab component, its Lease and the AdmissionCheck it answers.
const (
	controllerComponent = "gpudra-controller"
	controllerLease     = "gpudra-controller"
	topologyCheck       = "gpudra-topology"
)

// TestControllerLeaderHandover: the chart's controller elects itself leader on Lease
// gpudra/gpudra-controller. Stopped while Workloads wait for its gpudra.dev/topology check
// (SIGTERM: it hands the Lease over) and started again as a new leader, it leaves no Workload
// undecided and decides none twice, and every Job runs.
//
// The lab runs one replica of the chart's controller (its pod as a process), so the next
// leader is that replica started again; a second replica taking over needs a lab that runs
// each controller pod as a process and stops it when its pod is deleted.
func TestControllerLeaderHandover(t *testing.T) {
	if !state.Kueue || state.Install != lab.InstallChart {
		labLacks(t, "the chart's controller, with leader election, which runs in labs installed from the chart (install: chart) with Kueue")
	}
	holder := func(ctx context.Context) (string, error) {
		l, err := client.CoordinationV1().Leases("gpudra").Get(ctx, controllerLease, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			return "", fmt.Errorf("Lease %s has no holder", controllerLease)
		}
		return *l.Spec.HolderIdentity, nil
	}
	var leader string
	eventually(t, time.Minute, "the controller holds its Lease", func(ctx context.Context) error {
		var err error
		leader, err = holder(ctx)
		return err
	})

	const queue = "e2e-handover"
	applyForTest(t, decode(t, clusterQueue(queue, true, 64, 64))...)
	ns := namespace(t, "e2e-handover")
	apply(t, `
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: train, namespace: `+ns+`}
spec: {clusterQueue: `+queue+`}
`+oneGPUTemplate(ns))
	seen := watchCheckDecisions(t, ns)
	job := func(name string) string {
		return `
apiVersion: batch/v1
kind: Job
metadata: {name: ` + name + `, namespace: ` + ns + `, labels: {kueue.x-k8s.io/queue-name: train}}
spec:
  parallelism: 1
  completions: 1
  template:
    spec:
      restartPolicy: Never
      schedulingGates: [{name: gpudra.dev/placement}]
      resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]
      containers:
      - name: worker
        image: registry.k8s.io/pause:3.10
        resources:
          requests: {cpu: 100m}
          claims: [{name: gpu}]
`
	}
	var jobs []string
	for k := range 4 {
		jobs = append(jobs, "before-"+strconv.Itoa(k))
		apply(t, job(jobs[len(jobs)-1]))
	}
	eventually(t, 2*time.Minute, "the leader decides a first Workload", func(context.Context) error {
		if n := len(seen.decided()); n == 0 {
			return fmt.Errorf("no Workload decided yet")
		}
		return nil
	})

	// The leader goes while Workloads are still coming and waiting for it.
	restarted := make(chan error, 1)
	var c lab.Component
	go func() {
		var err error
		c, err = lab.RestartComponent(state, controllerComponent)
		restarted <- err
	}()
	for k := range 4 {
		jobs = append(jobs, "during-"+strconv.Itoa(k))
		apply(t, job(jobs[len(jobs)-1]))
	}
	if err := <-restarted; err != nil {
		t.Fatalf("restarting the controller: %v", err)
	}
	eventually(t, time.Minute, "the restarted controller is ready", func(ctx context.Context) error {
		if gone, why := lab.Exited(c); gone {
			t.Fatalf("the restarted controller exited: %v (log %s)", why, c.Log)
		}
		return readyz(ctx, c.Ports["health"])
	})
	eventually(t, time.Minute, "a new leader holds the Lease", func(ctx context.Context) error {
		h, err := holder(ctx)
		if err == nil && h == leader {
			return fmt.Errorf("Lease still held by %s", leader)
		}
		return err
	})
	for _, j := range jobs {
		eventually(t, 3*time.Minute, "job "+j+" is admitted and runs", jobRuns(ns, j, 1))
	}
	decided := seen.decided()
	if len(decided) != len(jobs) {
		t.Errorf("%d Workloads decided, want %d (one per Job): %v", len(decided), len(jobs), decided)
	}
	for wl, decisions := range decided {
		if len(decisions) != 1 || decisions[0] != "Ready" {
			t.Errorf("Workload %s: check %s decided %v, want once, Ready", wl, topologyCheck, decisions)
		}
	}
}

// checkDecisions records, per Workload, every decision written to its gpudra-topology check
// (a state other than Pending, with the time it was written).
type checkDecisions struct {
	mu   sync.Mutex
	seen map[string]map[string]string // workload → lastTransitionTime → state
}

// decided is each Workload's decisions, in no particular order.
func (d *checkDecisions) decided() map[string][]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string][]string{}
	for wl, by := range d.seen {
		for _, s := range by {
			out[wl] = append(out[wl], s)
		}
	}
	return out
}

func (d *checkDecisions) record(wl *unstructured.Unstructured) {
	checks, _, _ := unstructured.NestedSlice(wl.Object, "status", "admissionChecks")
	for _, c := range checks {
		m, _ := c.(map[string]any)
		name, _ := m["name"].(string)
		st, _ := m["state"].(string)
		at, _ := m["lastTransitionTime"].(string)
		if name != topologyCheck || st == "" || st == "Pending" {
			continue
		}
		d.mu.Lock()
		if d.seen[wl.GetName()] == nil {
			d.seen[wl.GetName()] = map[string]string{}
		}
		d.seen[wl.GetName()][at] = st
		d.mu.Unlock()
	}
}

// watchCheckDecisions watches the namespace's Workloads until the test ends, from before its
// first Workload, and records every decision of the gpudra-topology check.
func watchCheckDecisions(t *testing.T, ns string) *checkDecisions {
	t.Helper()
	d := &checkDecisions{seen: map[string]map[string]string{}}
	list, err := dyn().Resource(workloadsGVR).Namespace(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rv := list.GetResourceVersion()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			w, err := dyn().Resource(workloadsGVR).Namespace(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
			if err != nil {
				if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					t.Errorf("watching Workloads: %v (decisions may have been missed)", err)
					return
				}
				time.Sleep(time.Second)
				continue
			}
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					if ctx.Err() != nil {
						return // the test is over: its clean-up stopped the watch
					}
					t.Errorf("watching Workloads: %v (decisions may have been missed)", apierrors.FromObject(ev.Object))
					w.Stop()
					return
				}
				wl, ok := ev.Object.(*unstructured.Unstructured)
				if !ok {
					continue
				}
				rv = wl.GetResourceVersion()
				if ev.Type == watch.Added || ev.Type == watch.Modified {
					d.record(wl)
				}
			}
			w.Stop()
		}
	}()
	return d
}

// readyz: the component's /readyz on 127.0.0.1:port answers ok.
func readyz(ctx context.Context, port int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(port)+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s", resp.Status)
	}
	return nil
}
