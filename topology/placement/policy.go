package placement

import (
	"fmt"
	"math/rand"
	"sort"
	"strings"
)

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

// Behaviour is how a scheduler runs a policy. Policies that do not implement
// Behaved get the paper's: cached scores, every node scored, ties to the smallest rank.
type Behaviour struct {
	// Volatile scores draw random numbers and are never cached.
	Volatile bool
	// Kube selects like kube-scheduler: it scores only the first
	// percentageOfNodesToScore feasible nodes from a rotating start and breaks ties
	// at random.
	Kube bool
}

// Behaved is implemented by policies that need a Behaviour other than the paper's.
type Behaved interface {
	Behaviour() Behaviour
}

// Setup is what policies may be built from.
type Setup struct {
	// Typical are the pods FGD and gpudra's policy expect (the trace before tuning).
	Typical []Pod
	// Rand is the seed's random stream (Random policy, kube-scheduler ties).
	Rand *rand.Rand
}

// Policy names.
const (
	RandomName        = "Random"
	DotProdName       = "DotProd"
	GpuClusteringName = "GpuClustering"
	GpuPackingName    = "GpuPacking"
	BestFitName       = "BestFit"
	FGDName           = "FGD"
	KubeName          = "kube-scheduler"
	GpudraName        = "gpudra"
)

var factories = map[string]func(Setup) Policy{
	RandomName:        func(s Setup) Policy { return &Random{Rand: s.Rand} },
	DotProdName:       func(Setup) Policy { return DotProd{} },
	GpuClusteringName: func(Setup) Policy { return GpuClustering{} },
	GpuPackingName:    func(Setup) Policy { return GpuPacking{} },
	BestFitName:       func(Setup) Policy { return BestFit{} },
	FGDName:           func(s Setup) Policy { return NewFGD(s.Typical) },
	KubeName:          func(Setup) Policy { return LeastAllocated{} },
	GpudraName:        func(s Setup) Policy { return NewGpudra(s.Typical) },
}

// PolicyNames lists the policies in the order reports show them.
var PolicyNames = []string{RandomName, DotProdName, GpuClusteringName, GpuPackingName, BestFitName, FGDName, KubeName, GpudraName}

// PolicyName is the name of the policy that name spells in any case ("fgd" is FGD).
func PolicyName(name string) (string, error) {
	for _, n := range PolicyNames {
		if strings.EqualFold(n, name) {
			return n, nil
		}
	}
	names := append([]string(nil), PolicyNames...)
	sort.Strings(names)
	return "", fmt.Errorf("unknown policy %q: known policies are %s (in any case)", name, strings.Join(names, ", "))
}

// NewPolicy builds a policy by name, in any case.
func NewPolicy(name string, s Setup) (Policy, error) {
	n, err := PolicyName(name)
	if err != nil {
		return nil, err
	}
	return factories[n](s), nil
}

// BehaviourOf returns how a policy is run.
func BehaviourOf(p Policy) Behaviour {
	if b, ok := p.(Behaved); ok {
		return b.Behaviour()
	}
	return Behaviour{}
}
