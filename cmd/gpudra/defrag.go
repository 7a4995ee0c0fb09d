package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/defrag"
	"github.com/gpudra/gpudra/queueing/admission"
	"github.com/gpudra/gpudra/topology"
)

func newDefragCommand() *cobra.Command { return newDefragCommandWith(connect) }

func newDefragCommandWith(connect connector) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "defrag",
		Short: "Plan moves that undo GPU fragmentation",
	}
	cmd.AddCommand(newDefragPlanCommand(connect))
	return cmd
}

// defragGoalFlags are the flags that name what a plan frees.
type defragGoalFlags struct {
	freeGPUs     int
	freeNode     bool
	forWorkload  string
	maxEvictions int
	output       string
	labels       topology.LabelKeys
}

func newDefragPlanCommand(connect connector) *cobra.Command {
	cf := &clientFlags{}
	f := defragGoalFlags{labels: topology.DefaultLabelKeys}
	cmd := &cobra.Command{
		Use:   "plan (--free-gpus N | --free-node | --for workload/NAME)",
		Short: "Say how fragmented the cluster's GPUs are and which pods to move to free some",
		Long: `Plan reads the cluster with your kubeconfig (it writes nothing) and reports how fragmented
its GPUs are: gpudra-scheduler's fragmentation measure, and the free capacity stranded by
shares on otherwise free GPUs, by free GPUs scattered over partly used nodes and by MIG GPUs
left half used. It then plans the fewest moves that free N whole GPUs on one node, a whole
node, or room for a pending Kueue Workload: each move evicts a pod (a Workload's pods all
together) and the real DRA allocator places it again elsewhere, after the freed GPUs are
taken; a plan is shown only if every evicted pod runs again.

Only pods labelled gpudra.dev/movable=true move, and no move takes more disruptions than a
PodDisruptionBudget allows.`,
		Example: `  # Free one whole node for a node-sized job
  gpudra defrag plan --free-node

  # Room for a pending Kueue Workload, as JSON
  gpudra defrag plan --for workload/job-train-1a2b3 -n team-a -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.output != "" && !slices.Contains(outputFormats, f.output) {
				return fmt.Errorf("--output %q: accepted values are %s (default: text)", f.output, strings.Join(outputFormats, ", "))
			}
			if f.forWorkload != "" {
				if kind, name, ok := strings.Cut(f.forWorkload, "/"); !ok || kind != "workload" || name == "" {
					return fmt.Errorf("--for %q: want workload/NAME", f.forWorkload)
				}
			}
			if f.freeGPUs < 0 {
				return fmt.Errorf("--free-gpus %d: must be at least 1", f.freeGPUs)
			}
			if n := btoi(f.freeGPUs > 0) + btoi(f.freeNode) + btoi(f.forWorkload != ""); n != 1 {
				return fmt.Errorf("give exactly one of --free-gpus N, --free-node and --for workload/NAME")
			}
			c, ns, err := connectNamespace(cf, connect)
			if err != nil {
				return err
			}
			res, err := defragPlan(cmd.Context(), c, ns, f)
			if err != nil {
				return err
			}
			return printDefrag(cmd.OutOrStdout(), res, f.output)
		},
	}
	cf.addFlags(cmd.Flags())
	cmd.Flags().IntVar(&f.freeGPUs, "free-gpus", 0, "free this many whole GPUs on one node")
	cmd.Flags().BoolVar(&f.freeNode, "free-node", false, "free every GPU of one node")
	cmd.Flags().StringVar(&f.forWorkload, "for", "", "make room for a pending Kueue Workload (workload/NAME, in --namespace)")
	cmd.Flags().IntVar(&f.maxEvictions, "max-evictions", defrag.DefaultMaxEvictions, "evict at most this many pods")
	cmd.Flags().StringVarP(&f.output, "output", "o", "", "output format: "+strings.Join(outputFormats, ", ")+" (default: text)")
	cmd.Flags().StringVar(&f.labels.Block, "block-label", f.labels.Block, "node label holding the node's block, as the controller's --block-label")
	cmd.Flags().StringVar(&f.labels.Rack, "rack-label", f.labels.Rack, "node label holding the node's rack, as the controller's --rack-label")
	cmd.Flags().StringVar(&f.labels.ToR, "tor-label", f.labels.ToR, "node label holding the node's top-of-rack switch, as the controller's --tor-label")
	return cmd
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// defragPlan reads the cluster and plans for the flags' goal.
func defragPlan(ctx context.Context, c *clients, ns string, f defragGoalFlags) (*defrag.Result, error) {
	if f.maxEvictions < 1 {
		return nil, fmt.Errorf("--max-evictions %d: must be at least 1", f.maxEvictions)
	}
	cluster, err := readDefragCluster(ctx, c.kube)
	if err != nil {
		return nil, err
	}
	goal := defrag.Goal{FreeGPUs: f.freeGPUs, FreeNode: f.freeNode, MaxEvictions: f.maxEvictions}
	if f.forWorkload != "" {
		_, name, _ := strings.Cut(f.forWorkload, "/")
		if c.ctrl == nil {
			return nil, fmt.Errorf("--for %s: no client for Kueue's Workloads", f.forWorkload)
		}
		var wl kueue.Workload
		if err := c.ctrl.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &wl); err != nil {
			return nil, fmt.Errorf("--for %s: %w", f.forWorkload, err)
		}
		sets, err := admission.PodSets(ctx, c.ctrl, &wl)
		if err != nil {
			return nil, fmt.Errorf("--for %s: %w", f.forWorkload, err)
		}
		goal.Workload = &defrag.Workload{Name: ns + "/" + name, PodSets: sets}
	}
	return defrag.Plan(ctx, cluster, goal, defrag.Options{Labels: f.labels})
}

// readDefragCluster lists what the planner reads.
func readDefragCluster(ctx context.Context, kube kubernetes.Interface) (*defrag.Cluster, error) {
	var c defrag.Cluster
	all := metav1.ListOptions{}
	classes, err := kube.ResourceV1().DeviceClasses().List(ctx, all)
	if err != nil {
		return nil, fmt.Errorf("listing DeviceClasses: %w", err)
	}
	slices, err := kube.ResourceV1().ResourceSlices().List(ctx, all)
	if err != nil {
		return nil, fmt.Errorf("listing ResourceSlices: %w", err)
	}
	claims, err := kube.ResourceV1().ResourceClaims("").List(ctx, all)
	if err != nil {
		return nil, fmt.Errorf("listing ResourceClaims: %w", err)
	}
	pods, err := kube.CoreV1().Pods("").List(ctx, all)
	if err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	pdbs, err := kube.PolicyV1().PodDisruptionBudgets("").List(ctx, all)
	if err != nil {
		return nil, fmt.Errorf("listing PodDisruptionBudgets: %w", err)
	}
	nodes, err := kube.CoreV1().Nodes().List(ctx, all)
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	c.Classes, c.Slices, c.Claims, c.Pods, c.PDBs, c.Nodes = classes.Items, slices.Items, claims.Items, pods.Items, pdbs.Items, nodes.Items
	return &c, nil
}

// shownUnmovable bounds the pods the text lists as not movable.
const shownUnmovable = 10

// printDefrag writes the result as text, JSON or YAML.
func printDefrag(w io.Writer, res *defrag.Result, output string) error {
	switch output {
	case "json":
		data, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", data)
		return err
	case "yaml":
		data, err := yaml.Marshal(res)
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	}
	fmt.Fprintln(w, "now:")
	printFragmentation(w, &res.Before)
	fmt.Fprintf(w, "\ngoal: %s\n", res.Goal)
	switch {
	case !res.Found:
		fmt.Fprintf(w, "no plan: %s\n", res.Reason)
	case len(res.Moves) == 0:
		where := ""
		if res.Target != "" {
			where = " (" + res.Target + ")"
		}
		fmt.Fprintf(w, "met already%s: nothing to move\n", where)
	default:
		where := ""
		if res.Target != "" {
			where = " on " + res.Target
		}
		fmt.Fprintf(w, "plan%s: %s, %s evicted, each placed again by the allocator\n", where, count(len(res.Moves), "move"), count(res.Evictions, "pod"))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  MOVE\tPOD\tFROM\tTO\tDEVICES")
		for _, m := range res.Moves {
			for _, p := range m.Pods {
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", m.Unit, p.Pod, p.From, p.To, strings.Join(p.Devices, ","))
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if res.After != nil {
			fmt.Fprintln(w, "\nafter the moves:")
			printFragmentation(w, res.After)
		}
	}
	if len(res.Unmovable) > 0 {
		fmt.Fprintf(w, "\nnot movable (%d):\n", len(res.Unmovable))
		for k, u := range res.Unmovable {
			if k == shownUnmovable {
				fmt.Fprintf(w, "  ... and %d more (-o json lists them all)\n", len(res.Unmovable)-k)
				break
			}
			fmt.Fprintf(w, "  %s\n", u)
		}
	}
	return nil
}

func printFragmentation(w io.Writer, r *defrag.Report) {
	fmt.Fprintf(w, "  %d GPUs on %d nodes: %.2f allocated, %d free, at most %d free on one node\n", r.GPUs, r.Nodes, r.AllocatedGPUs, r.FreeGPUs, r.LargestFree)
	fmt.Fprintf(w, "  fragmentation (gpudra-scheduler's measure): %.2f GPUs\n", r.Fragmentation)
	s := r.Stranded
	fmt.Fprintf(w, "  stranded: %d GPUs part-used by shares (%.2f GPUs left on them), %d free GPUs on %d partly used nodes, %d MIG GPUs half used\n",
		s.SharedGPUs, s.SharedFree, s.ScatteredGPUs, s.ScatteredNodes, s.MIGPartialGPUs)
}

// count writes "1 move", "2 moves".
func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
