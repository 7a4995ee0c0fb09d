package reproduction

import (
	"fmt"
	"math/rand"
	"sort"
	"strings"

	"github.com/gpudra/gpudra/topology/placement"
)

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
	Typical []placement.Pod
	// Rand is the seed's random stream (Random policy, kube-scheduler ties).
	Rand *rand.Rand
}

// Policy names: the paper's baselines, FGD, kube-scheduler's default and gpudra's.
const (
	RandomName        = "Random"
	DotProdName       = "DotProd"
	GpuClusteringName = "GpuClustering"
	GpuPackingName    = "GpuPacking"
	BestFitName       = "BestFit"
	FGDName           = placement.FGDName
	KubeName          = "kube-scheduler"
	GpudraName        = placement.GpudraName
)

var factories = map[string]func(Setup) placement.Policy{
	RandomName:        func(s Setup) placement.Policy { return &Random{Rand: s.Rand} },
	DotProdName:       func(Setup) placement.Policy { return DotProd{} },
	GpuClusteringName: func(Setup) placement.Policy { return GpuClustering{} },
	GpuPackingName:    func(Setup) placement.Policy { return GpuPacking{} },
	BestFitName:       func(Setup) placement.Policy { return BestFit{} },
	FGDName:           func(s Setup) placement.Policy { return placement.NewFGD(s.Typical) },
	KubeName:          func(Setup) placement.Policy { return LeastAllocated{} },
	GpudraName:        func(s Setup) placement.Policy { return placement.NewGpudra(s.Typical) },
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
func NewPolicy(name string, s Setup) (placement.Policy, error) {
	n, err := PolicyName(name)
	if err != nil {
		return nil, err
	}
	return factories[n](s), nil
}

// BehaviourOf returns how a policy is run.
func BehaviourOf(p placement.Policy) Behaviour {
	if b, ok := p.(Behaved); ok {
		return b.Behaviour()
	}
	return Behaviour{}
}
