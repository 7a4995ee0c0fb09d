package gang

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	schedulingcorev1 "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/topology"
)

// Taints are the nodes' taints (Node spec.taints) by node name; a node without an entry
// has none.
type Taints map[string][]corev1.Taint

// candidates are the nodes of a domain a pod set's pods may be bound to: those its node
// selector matches whose NoSchedule and NoExecute taints its tolerations tolerate, as
// kube-scheduler's TaintToleration filter decides. skipped counts, by taint, the nodes
// the selector matches that a taint keeps out.
func candidates(logger klog.Logger, net *topology.Network, taints Taints, set PodSet, domainNodes []string) (nodes []string, skipped map[string]int) {
	for _, n := range domainNodes {
		if !net.Matches(n, set.NodeSelector) {
			continue
		}
		// A pod may only carry Lt/Gt tolerations when the API server accepted them, i.e.
		// with TaintTolerationComparisonOperators on: compare them rather than refuse them.
		if t, bad := schedulingcorev1.FindMatchingUntoleratedTaint(logger, taints[n], set.Tolerations, doNotSchedule, true); bad {
			if skipped == nil {
				skipped = map[string]int{}
			}
			skipped[t.ToString()]++
			continue
		}
		nodes = append(nodes, n)
	}
	return nodes, skipped
}

// doNotSchedule selects the taints that keep a pod off a node; PreferNoSchedule only
// lowers a node's score.
func doNotSchedule(t *corev1.Taint) bool {
	return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
}

// maxTaintsNamed bounds how many distinct taints a reason lists.
const maxTaintsNamed = 5

// taintText lists taints with how many nodes each keeps out, most nodes first.
func taintText(skipped map[string]int) string {
	names := make([]string, 0, len(skipped))
	for t := range skipped {
		names = append(names, t)
	}
	sort.Slice(names, func(a, b int) bool {
		if skipped[names[a]] != skipped[names[b]] {
			return skipped[names[a]] > skipped[names[b]]
		}
		return names[a] < names[b]
	})
	var parts []string
	for i, t := range names {
		if i == maxTaintsNamed {
			parts = append(parts, fmt.Sprintf("%d more", len(names)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", t, plural(skipped[t], "node")))
	}
	return strings.Join(parts, ", ")
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
