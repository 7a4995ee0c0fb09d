package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/simulated"
	"github.com/gpudra/gpudra/lab"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// The -gang mode measures one training gang end to end: a Job of pods × GPUs submitted to
// Kueue, from its creation until every pod is bound, in two rounds on one lab.
//
//   - Round A (gpudra): the Job goes to the ClusterQueue with the gpudra.dev/topology check,
//     its slices of one rack's worth of pods each kept in one rack, its pods gated until the
//     check pins them, scheduled by the lab's gpudra-scheduler on nodes that publish gpudra's
//     slices.
//   - Round B (baseline): the same Job through Kueue alone, scheduled by kube-scheduler (its
//     pods name a scheduler of their own, which this program starts for the round) on nodes
//     that publish plain slices (driver.PlainSlices) of the same GPUs.
//
// Each round has its own node set, a block of gangRackNodes-node racks, and its pods select
// that block (nodeSelector on topology.gpudra.dev/block). Round A runs first; its Job is
// deleted and its pods and claims awaited gone before round B starts (-baseline-first: B first).

const gangLabFile = `apiVersion: lab.gpudra.dev/v1alpha1
kind: Lab
scheduler: gpudra-scheduler
kueue: {enabled: true}
blocks:
- name: bench-plugins
  racks:
  - name: bench-plugins
    nodes:
    - {name: bench-plugin-node, profile: dgx-h100}
`

const (
	// gangRackNodes is how many 8-GPU nodes a rack of either node set has.
	gangRackNodes = 16
	// gangNodeGPUs is a DGX H100's GPUs.
	gangNodeGPUs = 8
	// baselineScheduler is the scheduler name of round B's pods, served by the kube-scheduler
	// this program starts.
	baselineScheduler = "gang-baseline"
)

// gangShape is the -gang flag: a Job of pods pods, each with one claim of gpus GPUs.
type gangShape struct{ pods, gpus int }

func (g gangShape) nodes() int { return g.pods * g.gpus / gangNodeGPUs }
func (g gangShape) racks() int { return g.nodes() / gangRackNodes }

// sliceSize is the pods of one rack: the slice the check keeps in one rack.
func (g gangShape) sliceSize() int { return gangRackNodes * gangNodeGPUs / g.gpus }

// parseGang reads -gang PODSxGPUS (128x8: 128 pods of 8 GPUs, 1 024 GPUs on 128 nodes).
func parseGang(v string) (gangShape, error) {
	p, g, ok := strings.Cut(strings.ToLower(strings.TrimSpace(v)), "x")
	pods, err1 := strconv.Atoi(p)
	gpus, err2 := strconv.Atoi(g)
	if !ok || err1 != nil || err2 != nil {
		return gangShape{}, fmt.Errorf("-gang %q: want PODSxGPUS, e.g. 128x8", v)
	}
	if !slices.Contains([]int{1, 2, 4, 8}, gpus) {
		return gangShape{}, fmt.Errorf("-gang %q: GPUs per pod %d: accepted 1, 2, 4, 8 (a DGX H100 has 8)", v, gpus)
	}
	s := gangShape{pods: pods, gpus: gpus}
	if pods < 1 || s.nodes()*gangNodeGPUs != pods*gpus || s.nodes()%gangRackNodes != 0 || s.nodes() > 1024 {
		return gangShape{}, fmt.Errorf("-gang %q: pods %d: accepted a count whose GPUs fill whole racks of %d nodes × 8 GPUs (a multiple of %d pods of %d GPUs), at most 1 024 nodes",
			v, pods, gangRackNodes, gangRackNodes*gangNodeGPUs/gpus, gpus)
	}
	return s, nil
}

// gangRound is one of the two rounds.
type gangRound struct {
	name      string // A or B
	mode      string // gpudra (the check, gpudra-scheduler, gpudra's slices) or kueue (baseline)
	set       string // the block of its nodes, and its namespace
	slices    string // gpudra or plain
	scheduler string // the scheduler that binds its pods
}

var gangRounds = []gangRound{
	{name: "A", mode: "gpudra", set: "gang-gpudra", slices: "gpudra", scheduler: lab.GpudraScheduler},
	{name: "B", mode: "kueue", set: "gang-plain", slices: "plain", scheduler: lab.KubeScheduler},
}

// gangJob is the round's Job: an Indexed Job of the gang's pods, each with one claim of
// shape.gpus GPUs. Round A's pods carry the check's annotations (the whole gang in one
// block, every slice of a rack's worth of pods in one rack) and its scheduling gate.
func gangJob(r gangRound, shape gangShape) string {
	meta, gate, sched := "", "", ""
	if r.mode == "gpudra" {
		meta = fmt.Sprintf(`
    metadata:
      annotations:
        gpudra.dev/required-topology: block
        gpudra.dev/slice-size: "%d"
        gpudra.dev/slice-required-topology: rack`, shape.sliceSize())
		gate = "\n      schedulingGates: [{name: gpudra.dev/placement}]"
	} else {
		sched = "\n      schedulerName: " + baselineScheduler
	}
	return fmt.Sprintf(`apiVersion: batch/v1
kind: Job
metadata:
  name: gang
  namespace: %[1]s
  labels: {kueue.x-k8s.io/queue-name: q}
spec:
  completionMode: Indexed
  parallelism: %[2]d
  completions: %[2]d
  template:%[3]s
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 0%[4]s%[5]s
      nodeSelector: {%[6]s: %[1]s}
      resourceClaims: [{name: gpus, resourceClaimTemplateName: gpus}]
      containers:
      - name: worker
        image: registry.k8s.io/pause:3.10
        resources:
          requests: {cpu: "1"}
          claims: [{name: gpus}]
`, r.set, shape.pods, meta, gate, sched, api.LabelBlock)
}

// gangNamespace is the round's namespace, LocalQueue and claim template of shape.gpus GPUs.
func gangNamespace(r gangRound, shape gangShape) string {
	return fmt.Sprintf(`---
apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: %[1]s}
spec: {clusterQueue: bench-%[2]s}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: gpus, namespace: %[1]s}
spec:
  spec:
    devices:
      requests:
      - {name: gpus, exactly: {deviceClassName: %[3]s, allocationMode: ExactCount, count: %[4]d}}
`, r.set, r.mode, api.DeviceClassGPU, shape.gpus)
}

// gangNodeName is node i of rack k of a round's set.
func gangNodeName(set string, rack, i int) string { return fmt.Sprintf("%s-r%d-n%02d", set, rack, i) }

// rackOfNode is the rack of a node named by gangNodeName ("" for another name).
func rackOfNode(set, node string) string {
	rest, ok := strings.CutPrefix(node, set+"-")
	if !ok {
		return ""
	}
	rack, _, ok := strings.Cut(rest, "-")
	if !ok {
		return ""
	}
	return rack
}

// slicesInOneRack counts the slices of sliceSize pods (by completion index) whose pods are
// all bound in one rack; index is each pod's completion index → its node.
func slicesInOneRack(set string, nodeOf map[int]string, pods, sliceSize int) int {
	kept := 0
	for s := 0; s*sliceSize < pods; s++ {
		racks := map[string]bool{}
		for i := s * sliceSize; i < min(pods, (s+1)*sliceSize); i++ {
			racks[rackOfNode(set, nodeOf[i])] = true
		}
		if len(racks) == 1 && !racks[""] {
			kept++
		}
	}
	return kept
}

func addGangNodes(ctx context.Context, cs kubernetes.Interface, r gangRound, shape gangShape) error {
	return forEachNode(shape.nodes(), func(rack, i int) error { return addGangNode(ctx, cs, r, rack, i) })
}

func addGangNode(ctx context.Context, cs kubernetes.Interface, r gangRound, rack, i int) error {
	name := gangNodeName(r.set, rack, i)
	rackName := fmt.Sprintf("%s-r%d", r.set, rack)
	if err := lab.AddKwokNode(ctx, cs, lab.Node{Name: name, Profile: "dgx-h100", Block: r.set, Rack: rackName, ToR: rackName,
		Resources: lab.NodeResources{CPU: "112", Memory: "2Ti", Pods: 110}}); err != nil {
		return err
	}
	return publishSlices(ctx, cs, name, r.slices, driver.PublishAll)
}

// publishSlices creates a DGX H100 node's ResourceSlices: gpudra's (kind "gpudra") or plain
// ones of the same GPUs (kind "plain", driver.PlainSlices).
func publishSlices(ctx context.Context, cs kubernetes.Interface, name, kind string, pub driver.Publication) error {
	opts, err := pub.Options(driver.RenderOptions{})
	if err != nil {
		return err
	}
	inv, rs, err := simulated.Slices("dgx-h100", name, opts)
	if err == nil && kind == "plain" {
		rs, err = driver.PlainSlices(inv, name)
	}
	if err != nil {
		return err
	}
	for _, s := range rs {
		if _, err := cs.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
	}
	return nil
}

func reportGang(w *os.File, shape gangShape, results []gangResult) {
	fmt.Fprintf(w, "\nOne Job of %d pods × %d GPUs (%d GPUs), %d nodes of 8 GPUs per round in %d racks of %d; slices of %d pods:\n\n",
		shape.pods, shape.gpus, shape.pods*shape.gpus, shape.nodes(), shape.racks(), gangRackNodes, shape.sliceSize())
	fmt.Fprint(w, "| stage (from the Job's creation) |")
	for _, r := range results {
		fmt.Fprintf(w, " %s: %s |", r.name, gangRoundTitle(r.gangRound))
	}
	fmt.Fprint(w, "\n|---|")
	for range results {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	for _, st := range gangStages {
		fmt.Fprintf(w, "| %s |", st)
		for _, r := range results {
			if d, ok := r.at[st]; ok {
				fmt.Fprintf(w, " %.1f s |", d.Seconds())
			} else {
				fmt.Fprint(w, " - |")
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprint(w, "| slices in one rack |")
	for _, r := range results {
		fmt.Fprintf(w, " %d of %d |", r.inRack, r.slices)
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, "\n| process: CPU s, peak memory (VmHWM) |")
	for _, r := range results {
		fmt.Fprintf(w, " %s |", r.name)
	}
	fmt.Fprint(w, "\n|---|")
	for range results {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	for _, p := range gangProcesses {
		fmt.Fprintf(w, "| %s |", p)
		for _, r := range results {
			if _, ok := r.cpu[p]; ok {
				fmt.Fprintf(w, " %.1f s, %d MiB |", r.cpu[p], r.peak[p]/1024)
			} else {
				fmt.Fprint(w, " - |")
			}
		}
		fmt.Fprintln(w)
	}
	for _, r := range results {
		if r.hwmNote != "" {
			fmt.Fprintf(w, "\nround %s: %s\n", r.name, r.hwmNote)
		}
	}
	at := map[string]time.Duration{}
	for _, r := range results {
		at[r.name] = r.at["all pods bound"]
	}
	if at["A"] > 0 && at["B"] > 0 {
		fmt.Fprintf(w, "\nall pods bound (round %s ran first): A %.1f s, B %.1f s: A/B = %.2f× (goal: at most 1.5×)\n",
			results[0].name, at["A"].Seconds(), at["B"].Seconds(), at["A"].Seconds()/at["B"].Seconds())
	}
}

func gangRoundTitle(r gangRound) string {
	if r.mode == "gpudra" {
		return "Kueue + gpudra check, gpudra-scheduler, gpudra's slices"
	}
	return "Kueue alone, kube-scheduler, plain slices"
}
