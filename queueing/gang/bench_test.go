package gang_test

import (
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/driver/simulated"
	"github.com/gpudra/gpudra/queueing/gang"
	"github.com/gpudra/gpudra/topology"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

const oneGPU = `
devices:
  requests:
  - {name: gpu, exactly: {deviceClassName: gpu.gpudra.dev}}
`

// BenchmarkPlanRackGang640 is the admission check's planning for the admission benchmark's
// shape (test/bench/admission): 10 racks × 64 DGX H100 nodes, gangs of 2, 4 and 8 one-GPU
// pods kept in one rack, planned and committed one after another until a third of the GPUs
// are taken (so later gangs walk past full nodes, as in a busy cluster).
func BenchmarkPlanRackGang640(b *testing.B) {
	var slices []*resourceapi.ResourceSlice
	labels := map[string]map[string]string{}
	for r := range 10 {
		for n := range 64 {
			name := fmt.Sprintf("r%02d-n%02d", r, n)
			_, rs, err := simulated.Slices("dgx-h100", name, driver.RenderOptions{})
			if err != nil {
				b.Fatal(err)
			}
			slices = append(slices, rs...)
			labels[name] = map[string]string{api.LabelBlock: "b", api.LabelRack: fmt.Sprintf("r%02d", r)}
		}
	}
	classes, err := deployments.DeviceClasses()
	if err != nil {
		b.Fatal(err)
	}
	net, err := topology.NetworkFromLabels(labels, topology.DefaultLabelKeys)
	if err != nil {
		b.Fatal(err)
	}
	claim, err := allocation.ParseClaimSpec([]byte(oneGPU))
	if err != nil {
		b.Fatal(err)
	}
	fresh := allocation.New(classes, slices)
	// "allocator-on-every-node" is the baseline: full nodes are found full by running the
	// allocator on them, as before State.Exhausted.
	for _, mode := range []struct {
		name string
		skip bool
	}{{"allocator-on-every-node", false}, {"skip-exhausted-nodes", true}} {
		b.Run(mode.name, func(b *testing.B) {
			defer gang.SkipExhaustedNodes(mode.skip)()
			st := fresh
			used, sizes := 0, []int{2, 4, 8}
			for i := 0; b.Loop(); i++ {
				size := sizes[i%len(sizes)]
				set := gang.PodSet{Name: "workers", Count: size, Required: topology.LevelRack, Claims: []resourceapi.ResourceClaimSpec{claim}}
				_, next, err := gang.Plan(b.Context(), st, net, nil, []gang.PodSet{set})
				if err != nil {
					b.Fatal(err)
				}
				st, used = next, used+size
				if used > 640*8/3 {
					st, used = fresh, 0
				}
			}
		})
	}
}

const eightGPUs = `
devices:
  requests:
  - {name: gpus, exactly: {deviceClassName: gpu.gpudra.dev, count: 8}}
`

// BenchmarkPlanLargeGang is the admission check's decision for one large training gang:
// pods of 8 GPUs, one block, 8 pods (one rack's worth) per rack, on racks of 8 DGX H100
// nodes. The gang grows from 256 to 1 024 GPUs on 128 and 512 nodes; with "busy", every
// other rack is already full, so the planner walks past full racks and nodes. The time
// per pod (ns/pod) stays flat when planning grows linearly with the gang and the cluster.
func BenchmarkPlanLargeGang(b *testing.B) {
	classes, err := deployments.DeviceClasses()
	if err != nil {
		b.Fatal(err)
	}
	claim, err := allocation.ParseClaimSpec([]byte(eightGPUs))
	if err != nil {
		b.Fatal(err)
	}
	for _, nodes := range []int{128, 512} {
		var slices []*resourceapi.ResourceSlice
		labels := map[string]map[string]string{}
		for n := range nodes {
			name := fmt.Sprintf("r%02d-n%d", n/8, n%8)
			_, rs, err := simulated.Slices("dgx-h100", name, driver.RenderOptions{})
			if err != nil {
				b.Fatal(err)
			}
			slices = append(slices, rs...)
			labels[name] = map[string]string{api.LabelBlock: "b", api.LabelRack: fmt.Sprintf("r%02d", n/8)}
		}
		net, err := topology.NetworkFromLabels(labels, topology.DefaultLabelKeys)
		if err != nil {
			b.Fatal(err)
		}
		empty := allocation.New(classes, slices)
		// Every other rack full: one 8-GPU claim committed on each of its nodes.
		busy := empty.Clone()
		for n := range nodes {
			if (n/8)%2 == 1 {
				c := &resourceapi.ResourceClaim{Spec: *claim.DeepCopy()}
				c.Name, c.Namespace, c.UID = fmt.Sprintf("busy-%d", n), "busy", types.UID(fmt.Sprintf("busy-%d", n))
				if _, err := busy.AllocateAndCommit(b.Context(), fmt.Sprintf("r%02d-n%d", n/8, n%8), c); err != nil {
					b.Fatal(err)
				}
			}
		}
		for _, fill := range []struct {
			name string
			st   *allocation.State
		}{{"empty", empty}, {"busy", busy}} {
			for _, pods := range []int{32, 64, 128} {
				if fill.name == "busy" && pods*2 > nodes {
					continue // half the nodes are full: the gang would not fit
				}
				b.Run(fmt.Sprintf("nodes=%d/%s/gpus=%d", nodes, fill.name, pods*8), func(b *testing.B) {
					b.ReportAllocs()
					set := gang.PodSet{Name: "trainer", Count: pods, Required: topology.LevelBlock,
						SliceSize: 8, SliceRequired: topology.LevelRack, Claims: []resourceapi.ResourceClaimSpec{claim}}
					for b.Loop() {
						if _, _, err := gang.Plan(b.Context(), fill.st, net, nil, []gang.PodSet{set}); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*pods), "ns/pod")
				})
			}
		}
	}
}
