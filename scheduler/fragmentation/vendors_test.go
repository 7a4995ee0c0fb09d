package fragmentation

import (
	"fmt"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/driver/simulated"
	"github.com/gpudra/gpudra/topology/placement"
)

// mixedPool is two AMD MI300X nodes and two NVIDIA H100 nodes of 8 GPUs each, named so
// that an empty node comes first by name: the NodeName tie-break alone would pick it.
var mixedPool = []placement.NodeSpec{
	{Name: "a-mi300x-empty", CPU: 64000, Memory: 262144},
	{Name: "b-mi300x-half", CPU: 64000, Memory: 262144},
	{Name: "c-h100-empty", CPU: 64000, Memory: 262144},
	{Name: "d-h100-half", CPU: 64000, Memory: 262144},
}

// mixedSlices are what each node of mixedPool publishes: simulated KFD and NVML nodes.
func mixedSlices(n placement.NodeSpec) ([]*resourceapi.ResourceSlice, error) {
	if n.Name[2:8] == "mi300x" {
		_, rs, err := simulated.KFDSlices("mi300x-8", n.Name, driver.RenderOptions{})
		return rs, err
	}
	_, rs, err := simulated.Slices("dgx-h100", n.Name, driver.RenderOptions{MIG: driver.MIGNone})
	return rs, err
}

// packingArgs are typical pods of 1, 2, 4 and 8 whole GPUs: an empty node is worth
// keeping for the large ones.
var packingArgs = Args{TieBreak: TieBreakNodeName, TypicalPods: []TypicalPod{
	{CPU: resource.MustParse("4"), GPUs: 1, GPUMilli: 1000, Count: 10},
	{CPU: resource.MustParse("8"), GPUs: 2, GPUMilli: 1000, Count: 10},
	{CPU: resource.MustParse("16"), GPUs: 4, GPUMilli: 1000, Count: 10},
	{CPU: resource.MustParse("32"), GPUs: 8, GPUMilli: 1000, Count: 10},
}}

// classPod is a pod of 1 CPU whose claim asks for count devices of a DeviceClass.
func (l *lab) classPod(name, class string, count int) (*placement.Pod, *resourceapi.ResourceClaim) {
	spec, err := allocation.ParseClaimSpec(fmt.Appendf(nil, "devices: {requests: [{name: gpu, exactly: {deviceClassName: %s, count: %d}}]}", class, count))
	if err != nil {
		l.t.Fatal(err)
	}
	c := &resourceapi.ResourceClaim{Spec: spec}
	c.Name, c.Namespace, c.UID = name, "default", types.UID("claim-"+name)
	return &placement.Pod{Name: name, CPU: 1000, Memory: 1024}, c
}

// place schedules a pod asking for count devices of class with the plugin, binds it where
// the plugin chose, and returns that node.
func (l *lab) place(pl *Plugin, name, class string, count int) (string, *cycleState) {
	p, c := l.classPod(name, class, count)
	pod := podOf(p)
	l.claim(pod, c)
	got, st := l.schedule(pl, pod, c)
	if got == "" {
		l.t.Fatalf("pod %s (%d of %s) fits nowhere", name, count, class)
	}
	l.bind(pod, c, got)
	return got, st
}

// pinTo binds a pod asking for count devices of class to the named node, without the plugin.
func (l *lab) pinTo(node, name, class string, count int) {
	p, c := l.classPod(name, class, count)
	pod := podOf(p)
	l.claim(pod, c)
	l.bind(pod, c, node)
}

// In a pool of AMD and NVIDIA nodes, a one-GPU pod of either vendor's class, or of any
// vendor's, goes to a half-full node rather than an empty one: the plugin counts AMD GPUs
// as it counts NVIDIA's.
func TestPackingInAMixedPool(t *testing.T) {
	l := newLabOf(t, mixedPool, mixedSlices)
	pl := newPlugin(t, l, packingArgs)
	l.pinTo("b-mi300x-half", "fill-amd", "amd-gpu.gpudra.dev", 4)
	l.pinTo("d-h100-half", "fill-nv", "gpu.gpudra.dev", 4)

	for _, tc := range []struct {
		class string
		want  []string
	}{
		{"amd-gpu.gpudra.dev", []string{"b-mi300x-half"}},
		{"gpu.gpudra.dev", []string{"d-h100-half"}},
		{"any-gpu.gpudra.dev", []string{"b-mi300x-half", "d-h100-half"}},
	} {
		got, st := l.place(pl, "one-"+tc.class[:3], tc.class, 1)
		if !slices.Contains(tc.want, got) {
			t.Errorf("one GPU of %s went to %s, want one of %v (free GPUs: %v)", tc.class, got, tc.want, freeByNode(st))
		}
	}
}

// An XGMI group takes its members off the node's free GPUs, as an NVLink group does.
func TestAllocatedXGMIGroupTakesItsMembers(t *testing.T) {
	l := newLabOf(t, mixedPool[:1], mixedSlices)
	pl := newPlugin(t, l, packingArgs)
	l.pinTo("a-mi300x-empty", "quad", "gpu-group-4.gpudra.dev", 1)
	_, st := l.place(pl, "one", "amd-gpu.gpudra.dev", 1)
	free := st.nodes["a-mi300x-empty"].free
	if len(free) != 8 || countFree(free) != 4 {
		t.Fatalf("with a group of 4 allocated the plugin sees free GPUs %v, want 8 GPUs of which 4 free", free)
	}
}

func countFree(free []int64) int {
	n := 0
	for _, f := range free {
		if f == placement.MilliPerGPU {
			n++
		}
	}
	return n
}

func freeByNode(st *cycleState) map[string][]int64 {
	if st == nil {
		return nil
	}
	out := map[string][]int64{}
	for name, g := range st.nodes {
		out[name] = g.free
	}
	return out
}
