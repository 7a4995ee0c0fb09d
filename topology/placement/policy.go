package placement

// Policy scores a node for a pod, the way one kube-scheduler Score plugin would.
type Policy interface {
	Name() string
	// Score rates placing p on n, which fits it, and names the GPUs the policy would
	// use (nil for a CPU-only pod). Higher is better.
	Score(n *Node, p *Pod) Choice
}

// Choice is a policy's verdict on one node.
type Choice struct {
	Score int64
	GPUs  []int
}

// Names of the policies of this package.
const (
	FGDName    = "FGD"
	GpudraName = "gpudra"
)
