package lab

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// DemoMIGLayout is the chart layout the demo applies to a static-MIG node through its label:
// seven 1g.10gb instances on each 80 GB GPU (deployments/examples/mig-slice.yaml asks for one).
const DemoMIGLayout = "all-1g.10gb"

// demoMIGNode is the demo's node for a MIG layout: the first node, in lab file order, whose
// plugin applies layouts (static MIG) and that publishes a MIG-capable GPU. "" when none.
func demoMIGNode(ctx context.Context, cs kubernetes.Interface, nodes []Node) (string, error) {
	for _, n := range nodes {
		if n.Real || !migLayoutsApply(n.MIG) {
			continue
		}
		slices, err := NodeSlices(ctx, cs, n.Name)
		if err != nil {
			return "", err
		}
		for _, s := range slices {
			for _, d := range s.Spec.Devices {
				if info, err := api.ReadDevice(&d); err == nil && info.MIGCapable {
					return n.Name, nil
				}
			}
		}
	}
	return "", nil
}

// demoMIGLayoutStep labels a static-MIG node with DemoMIGLayout, as the README's MIG flow
// says, waits for its plugin to report the layout in the state label, and prints what the node
// publishes then. A node already labelled is left as it is.
func demoMIGLayoutStep(ctx context.Context, out io.Writer, cs kubernetes.Interface, s *State, timeout time.Duration) error {
	node, err := demoMIGNode(ctx, cs, s.Nodes)
	if err != nil {
		return err
	}
	if node == "" {
		fmt.Fprintln(out, "\nNo MIG layout in this demo: no node runs --mig=static with a MIG-capable GPU.")
		return nil
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	layout := n.Labels[api.LabelMIGConfig]
	if layout == "" {
		layout = DemoMIGLayout
		fmt.Fprintf(out, "\nMIG layouts: kubectl label node %s %s=%s\n", node, api.LabelMIGConfig, layout)
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, api.LabelMIGConfig, layout)
		if _, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("label node %s with MIG layout %s: %w", node, layout, err)
		}
	} else {
		fmt.Fprintf(out, "\nMIG layouts: node %s is labelled %s=%s\n", node, api.LabelMIGConfig, layout)
	}
	var state string
	werr := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		state = n.Labels[api.LabelMIGConfigState]
		if state != api.MIGConfigSuccess && state != api.MIGConfigFailed {
			return false, nil
		}
		// The layout is applied; wait for the pool to show it.
		return poolPublished(ctx, cs, node) == nil, nil
	})
	why := lastMIGLayoutEvent(ctx, cs, node)
	if werr != nil {
		return fmt.Errorf("node %s did not report MIG layout %s within %s (state %q; %s)", node, layout, timeout, state, why)
	}
	if state == api.MIGConfigFailed {
		return fmt.Errorf("node %s: MIG layout %s failed: %s", node, layout, why)
	}
	slices, err := NodeSlices(ctx, cs, node)
	if err != nil {
		return err
	}
	profiles := map[string]int{}
	for _, sl := range slices {
		for _, d := range sl.Spec.Devices {
			if info, err := api.ReadDevice(&d); err == nil && info.Type == api.TypeMIG && info.MIGProfile != "" {
				profiles[info.MIGProfile]++
			}
		}
	}
	var parts []string
	for p, c := range profiles {
		parts = append(parts, fmt.Sprintf("%d × %s", c, p))
	}
	sort.Strings(parts)
	fmt.Fprintf(out, "  %s=%s; %s\n  node %s now publishes its MIG instances: %s\n", api.LabelMIGConfigState, state, why, node, strings.Join(parts, ", "))
	return nil
}

// lastMIGLayoutEvent is the message of the newest MIG layout Event on node, or a note that
// there is none.
func lastMIGLayoutEvent(ctx context.Context, cs kubernetes.Interface, node string) string {
	list, err := cs.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.SelectorFromSet(fields.Set{"involvedObject.kind": "Node", "involvedObject.name": node}).String(),
	})
	if err != nil {
		return "no Event read: " + err.Error()
	}
	var last *corev1.Event
	for i := range list.Items {
		e := &list.Items[i]
		if !strings.HasPrefix(e.Reason, "MIGLayout") {
			continue
		}
		if last == nil || eventTime(e).After(eventTime(last)) {
			last = e
		}
	}
	if last == nil {
		return "no MIG layout Event on the node"
	}
	return fmt.Sprintf("Event %s: %s", last.Reason, last.Message)
}

func eventTime(e *corev1.Event) time.Time {
	for _, t := range []time.Time{e.EventTime.Time, e.LastTimestamp.Time, e.CreationTimestamp.Time} {
		if !t.IsZero() {
			return t
		}
	}
	return time.Time{}
}
