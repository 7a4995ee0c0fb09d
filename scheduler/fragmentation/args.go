package fragmentation

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpudra/gpudra/topology/placement"
)

// Args configure the plugin (pluginConfig[].args in a KubeSchedulerConfiguration).
type Args struct {
	metav1.TypeMeta `json:",inline"`
	// TypicalPods is the workload the cluster expects: the pod shapes whose future
	// placement fragmentation is measured against, each with its relative frequency
	// (FGD's "typical pods"; `gpudra sim --typical-pods` derives them from a trace).
	TypicalPods []TypicalPod `json:"typicalPods"`
	// TieBreak decides between nodes with the same score: "Random" (kube-scheduler's own
	// choice, the default) or "NodeName" (the first node by name wins; reproducible, what
	// a trace replay needs to compare with the simulator).
	TieBreak string `json:"tieBreak,omitempty"`
}

// TypicalPod is one pod shape of the expected workload.
type TypicalPod struct {
	// CPU the pod requests.
	CPU resource.Quantity `json:"cpu"`
	// Memory the pod requests; omitted, the policy does not count GPUs stranded by a
	// node's memory for this shape.
	Memory resource.Quantity `json:"memory,omitempty"`
	// GPUs is the number of GPUs; 0 for a CPU-only pod.
	GPUs int `json:"gpus"`
	// GPUMilli is the share of each GPU in thousandths: 1000 for whole GPUs, less for a
	// share of one GPU (then GPUs must be 1).
	GPUMilli int64 `json:"gpuMilli,omitempty"`
	// ProductNames are the GPU models the pod accepts (productName attribute); empty: any.
	ProductNames []string `json:"productNames,omitempty"`
	// Count is how often the shape occurs, relative to the others.
	Count int `json:"count"`
}

// Tie-break modes.
const (
	TieBreakRandom   = "Random"
	TieBreakNodeName = "NodeName"
)

// Validate checks the args, naming the field and the accepted values.
func (a *Args) Validate() error {
	switch a.TieBreak {
	case "", TieBreakRandom, TieBreakNodeName:
	default:
		return fmt.Errorf("tieBreak %q: accepted values are %s, %s", a.TieBreak, TieBreakRandom, TieBreakNodeName)
	}
	if len(a.TypicalPods) == 0 {
		return fmt.Errorf("typicalPods: at least one pod shape is required (see deployments/scheduler for a sample)")
	}
	for i, t := range a.TypicalPods {
		f := fmt.Sprintf("typicalPods[%d]", i)
		switch {
		case t.CPU.Sign() < 0:
			return fmt.Errorf("%s.cpu %s: must not be negative", f, t.CPU.String())
		case t.Memory.Sign() < 0:
			return fmt.Errorf("%s.memory %s: must not be negative", f, t.Memory.String())
		case t.GPUs < 0:
			return fmt.Errorf("%s.gpus %d: must not be negative", f, t.GPUs)
		case t.GPUs > 0 && (t.GPUMilli < 1 || t.GPUMilli > placement.MilliPerGPU):
			return fmt.Errorf("%s.gpuMilli %d: accepted values are 1 to %d", f, t.GPUMilli, placement.MilliPerGPU)
		case t.GPUs > 1 && t.GPUMilli != placement.MilliPerGPU:
			return fmt.Errorf("%s.gpuMilli %d: a pod with %d GPUs takes them whole (1000)", f, t.GPUMilli, t.GPUs)
		case t.GPUs == 0 && t.GPUMilli != 0:
			return fmt.Errorf("%s.gpuMilli %d: a CPU-only pod (gpus 0) takes no GPU share", f, t.GPUMilli)
		case t.Count < 1:
			return fmt.Errorf("%s.count %d: must be at least 1", f, t.Count)
		}
	}
	return nil
}

// Pods expands the typical pods into the pod list a placement policy is built from:
// Count pods of each shape, GPU models by product name.
func (a *Args) Pods() []placement.Pod {
	var out []placement.Pod
	for i, t := range a.TypicalPods {
		p := placement.Pod{Name: fmt.Sprintf("typical-%d", i), CPU: t.CPU.MilliValue(), Memory: t.Memory.Value() >> 20, GPUs: t.GPUs, GPUMilli: t.GPUMilli}
		if len(t.ProductNames) > 0 {
			p.Models = append([]string(nil), t.ProductNames...)
		}
		for range t.Count {
			out = append(out, p)
		}
	}
	return out
}
