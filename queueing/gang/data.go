package gang

import (
	"fmt"
	"slices"

	"github.com/gpudra/gpudra/locality"
	"github.com/gpudra/gpudra/topology"
)

// Data locality: a pod set that names datasets (PodSet.Data) prefers, among the domains it
// fits in, the one where most of its pods land on nodes caching them, and inside a domain
// tries the caching nodes first. It is a preference: a set that fits only where nothing is
// cached goes there.

// cachingFirst orders nodes by how many of the set's datasets they cache, most first,
// keeping the given order among equals.
func cachingFirst(net *topology.Network, set PodSet, nodes []string) []string {
	if len(set.Data) == 0 {
		return nodes
	}
	out := slices.Clone(nodes)
	slices.SortStableFunc(out, func(a, b string) int {
		return locality.Cached(net.Labels(b), set.Data) - locality.Cached(net.Labels(a), set.Data)
	})
	return out
}

// localReads counts, over a placement's pods, the datasets each reads from its own node's
// cache.
func localReads(net *topology.Network, set PodSet, nodes []string) int {
	n := 0
	for _, node := range nodes {
		n += locality.Cached(net.Labels(node), set.Data)
	}
	return n
}

// dataNotes say, for each dataset, on how many of the domain's nodes it is cached and how
// many of the set's pods were planned on one of them: "dataset team/imagenet cached on 3
// of 4 nodes of block-b/rack-b1; 2 of 2 pods planned there".
func dataNotes(net *topology.Network, set PodSet, domain topology.Domain, planned []string) []string {
	where := "the cluster"
	if domain.Name != "" {
		where = domain.Name
	}
	var out []string
	for _, need := range set.Data {
		out = append(out, fmt.Sprintf("%s; %d of %d pods planned there", CachedText(net, need, domain.Nodes, where),
			countCaching(net, need, planned), len(planned)))
	}
	return out
}

// CachedText is "dataset <ns>/<name> cached on <k> of <n> nodes of <where>".
func CachedText(net *topology.Network, need locality.Need, nodes []string, where string) string {
	return fmt.Sprintf("dataset %s cached on %d of %d nodes of %s", need.Dataset, countCaching(net, need, nodes), len(nodes), where)
}

func countCaching(net *topology.Network, need locality.Need, nodes []string) int {
	n := 0
	for _, node := range nodes {
		if locality.Caches(net.Labels(node), need) {
			n++
		}
	}
	return n
}
