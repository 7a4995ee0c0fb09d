package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/yaml"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/internal/explain"
	"github.com/gpudra/gpudra/queueing/admission"
	"github.com/gpudra/gpudra/queueing/dependencies"
	"github.com/gpudra/gpudra/topology"
)

// explainKinds are the objects explain accepts, as KIND/NAME.
var explainKinds = []string{"claim", "pod", "workload", "job", "jobset", "pytorchjob", "tfjob", "trainjob"}

// outputFormats are the accepted values of --output ("" is the table).
var outputFormats = []string{"json", "yaml"}

// clients reach the cluster: kube for the core and DRA APIs, ctrl for Kueue's Workloads
// (and what the admission check reads).
type clients struct {
	kube kubernetes.Interface
	ctrl client.Reader
}

// clientFlags are kubectl's client flags (--kubeconfig, --context, --as, --server,
// --request-timeout, -n and the rest), bound the way kubectl binds them. They are bound with
// client-go's clientcmd rather than cli-runtime's ConfigFlags: cli-runtime links kustomize,
// whose use of Go's plugin package makes the binary resolve every symbol at start, and the
// NVML symbols gpudra inspect resolves when it loads the library would then stop it
// starting on machines without NVML.
type clientFlags struct {
	kubeconfig string
	overrides  clientcmd.ConfigOverrides
}

func (f *clientFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.kubeconfig, clientcmd.RecommendedConfigPathFlag, "", "Path to the kubeconfig file to use for CLI requests (default: $KUBECONFIG or ~/.kube/config)")
	clientcmd.BindOverrideFlags(&f.overrides, fs, clientcmd.RecommendedConfigOverrideFlags(""))
}

// config is the kubeconfig with the flags' overrides applied.
func (f *clientFlags) config() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &f.overrides)
}

// connector makes the clients from the command's client flags.
type connector func(*clientFlags) (*clients, error)

// connect builds clients from kubeconfig, context and overrides the flags give.
func connect(cf *clientFlags) (*clients, error) {
	cfg, err := cf.config().ClientConfig()
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, kueue.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	ctrl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	return &clients{kube: kube, ctrl: ctrl}, nil
}

func newExplainCommand() *cobra.Command { return newExplainCommandWith(connect) }

func newExplainCommandWith(connect connector) *cobra.Command {
	cf := &clientFlags{}
	var output string
	var show int
	labels := topology.DefaultLabelKeys
	cmd := &cobra.Command{
		Use:   "explain (claim/NAME | pod/NAME | workload/NAME | job/NAME | jobset/NAME | pytorchjob/NAME | tfjob/NAME | trainjob/NAME)",
		Short: "Explain why a ResourceClaim, pod or Kueue Workload is pending, or where it goes",
		Long: `Explain asks Kubernetes' real DRA allocator, over the cluster's live ResourceSlices and
allocated claims, whether the claim fits on each node now; for the nodes that came closest it
says which request or constraint fails and which claims hold the devices it wanted.

For a pod, the nodes kube-scheduler's filters rule out before devices (taints the pod does not
tolerate, its nodeSelector and required node affinity, CPU, memory and pod count, unschedulable
nodes) are reported first, in the scheduler's words, and never fit.

For a Kueue Workload (or job/NAME, jobset/NAME, pytorchjob/NAME, tfjob/NAME, trainjob/NAME: the
Workload Kueue made for that Job, JobSet, PyTorchJob, TFJob or TrainJob), it says what the
gpudra.dev/topology admission check sees: each pod set with its count, claim templates and
required topology, each domain (block, rack or host) at that level with how many of the pod
set's pods fit there on the devices free now, what the check would answer now, and the check's
state and message on the Workload. While Kueue has not reserved quota, it also shows Kueue's
reason and message (a claim template Kueue cannot charge, a queue without room).`,
		Example: `  # Why is this claim pending?
  gpudra explain claim/nvlink-quad -n gpudra-demo

  # A pod: the scheduler's node filters, then each of its claims
  gpudra explain pod/trainer-0 -n team-a --nodes 10

  # A Kueue Job's gang, as the topology admission check sees it, as JSON
  gpudra explain job/train-3d -n team-a -o json`,
		Args: cobra.ExactArgs(1),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			kind, prefix, ok := strings.Cut(toComplete, "/")
			if !ok {
				var out []string
				for _, k := range explainKinds {
					out = append(out, k+"/")
				}
				return out, cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
			}
			c, ns, err := connectNamespace(cf, connect)
			if err != nil {
				return nil, cobra.ShellCompDirectiveError
			}
			names, err := objectNames(cmd.Context(), c, ns, kind)
			if err != nil {
				return nil, cobra.ShellCompDirectiveError
			}
			var out []string
			for _, n := range names {
				if strings.HasPrefix(n, prefix) {
					out = append(out, kind+"/"+n)
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, name, ok := strings.Cut(args[0], "/")
			if !ok || !slices.Contains(explainKinds, kind) || name == "" {
				return fmt.Errorf("%q: want KIND/NAME with KIND one of %s", args[0], strings.Join(explainKinds, ", "))
			}
			if output != "" && !slices.Contains(outputFormats, output) {
				return fmt.Errorf("--output %q: accepted values are %s (default: a table)", output, strings.Join(outputFormats, ", "))
			}
			if show < 1 {
				return fmt.Errorf("--nodes %d: must be at least 1", show)
			}
			c, ns, err := connectNamespace(cf, connect)
			if err != nil {
				return err
			}
			rep, err := buildReport(cmd.Context(), c, labels, ns, kind, name)
			if err != nil {
				return err
			}
			return printReport(cmd.OutOrStdout(), rep, output, show)
		},
	}
	cf.addFlags(cmd.Flags())
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: "+strings.Join(outputFormats, ", ")+" (default: a table)")
	cmd.Flags().IntVar(&show, "nodes", 5, "how many of the closest nodes to show per claim in the table")
	cmd.Flags().StringVar(&labels.Block, "block-label", labels.Block, "node label holding the node's block, as the controller's --block-label")
	cmd.Flags().StringVar(&labels.Rack, "rack-label", labels.Rack, "node label holding the node's rack, as the controller's --rack-label")
	cmd.Flags().StringVar(&labels.ToR, "tor-label", labels.ToR, "node label holding the node's top-of-rack switch, as the controller's --tor-label")
	registerCompletions(cmd, cf, connect)
	return cmd
}

// connectNamespace connects and resolves the namespace: --namespace, else the context's.
func connectNamespace(cf *clientFlags, connect connector) (*clients, string, error) {
	ns, _, err := cf.config().Namespace()
	if err != nil {
		return nil, "", err
	}
	c, err := connect(cf)
	return c, ns, err
}

func registerCompletions(cmd *cobra.Command, cf *clientFlags, connect connector) {
	fixed := func(values ...string) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return values, cobra.ShellCompDirectiveNoFileComp
		}
	}
	_ = cmd.RegisterFlagCompletionFunc("output", fixed(outputFormats...))
	_ = cmd.RegisterFlagCompletionFunc("namespace", func(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		c, err := connect(cf)
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		list, err := c.kube.CoreV1().Namespaces().List(cmd.Context(), metav1.ListOptions{})
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		var out []string
		for _, n := range list.Items {
			if strings.HasPrefix(n.Name, toComplete) {
				out = append(out, n.Name)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	})
	for flag, names := range map[string]func(clientcmdapi.Config) []string{
		"context": func(c clientcmdapi.Config) []string { return slices.Collect(maps.Keys(c.Contexts)) },
		"cluster": func(c clientcmdapi.Config) []string { return slices.Collect(maps.Keys(c.Clusters)) },
		"user":    func(c clientcmdapi.Config) []string { return slices.Collect(maps.Keys(c.AuthInfos)) },
	} {
		_ = cmd.RegisterFlagCompletionFunc(flag, func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			raw, err := cf.config().RawConfig()
			if err != nil {
				return nil, cobra.ShellCompDirectiveError
			}
			out := slices.DeleteFunc(names(raw), func(n string) bool { return !strings.HasPrefix(n, toComplete) })
			slices.Sort(out)
			return out, cobra.ShellCompDirectiveNoFileComp
		})
	}
}

// objectNames lists the names of one kind explain accepts, in the namespace.
func objectNames(ctx context.Context, c *clients, ns, kind string) ([]string, error) {
	var out []string
	switch kind {
	case "claim":
		list, err := c.kube.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, o := range list.Items {
			out = append(out, o.Name)
		}
	case "pod":
		list, err := c.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, o := range list.Items {
			out = append(out, o.Name)
		}
	case "job":
		list, err := c.kube.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, o := range list.Items {
			out = append(out, o.Name)
		}
	case "workload", "jobset", "pytorchjob", "tfjob", "trainjob":
		var list kueue.WorkloadList
		if err := c.ctrl.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		for _, o := range list.Items {
			if kind == "workload" {
				out = append(out, o.Name)
				continue
			}
			// Jobs of these kinds are named by the Workloads Kueue made for them.
			if owner, ok := strings.CutPrefix(explain.JobOf(&o), kind+"/"); ok {
				out = append(out, owner)
			}
		}
	}
	sort.Strings(out)
	out = slices.Compact(out)
	return out, nil
}

// printUsage prints a device's usage under its request line.
func printUsage(w io.Writer, u *explain.DeviceUsage) {
	fmt.Fprintf(w, "    uses %s memory", u.Memory())
	if u.SMUtilizationPercent != nil {
		fmt.Fprintf(w, ", SM %d%%", *u.SMUtilizationPercent)
	}
	if u.ComputeGuaranteePercent != nil && u.ComputeCapPercent != nil {
		fmt.Fprintf(w, " (guaranteed %d%%, cap %d%%)", *u.ComputeGuaranteePercent, *u.ComputeCapPercent)
	}
	if h := u.HeldBack(); h != "" {
		fmt.Fprintf(w, ", held back %s by High shares", h)
	}
	noun := "processes"
	if u.Processes == 1 {
		noun = "process"
	}
	fmt.Fprintf(w, ", %d %s, as of %s\n", u.Processes, noun, u.Observed())
}

// explainText prints the table for claim/NAME or pod/NAME.
func explainText(ctx context.Context, w io.Writer, c kubernetes.Interface, ns, kind, name string, show int) error {
	rep, err := buildReport(ctx, &clients{kube: c}, topology.DefaultLabelKeys, ns, kind, name)
	if err != nil {
		return err
	}
	return printReport(w, rep, "", show)
}

func buildReport(ctx context.Context, c *clients, labels topology.LabelKeys, ns, kind, name string) (*explain.Report, error) {
	switch kind {
	case "workload":
		return explain.Workload(ctx, workloadReader{c}, labels, ns, name)
	}
	for _, k := range explain.JobKinds {
		if k.Name == kind {
			return explain.JobWorkload(ctx, workloadReader{c}, labels, ns, k, name)
		}
	}
	return claimsReport(ctx, c.kube, ns, kind, name)
}

// workloadReader reads a Workload's explanation from the API server: Kueue's objects and
// what the admission check reads through the controller-runtime client, Kueue's events
// through the clientset when there is one.
type workloadReader struct{ c *clients }

func (r workloadReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return r.c.ctrl.Get(ctx, key, obj, opts...)
}

func (r workloadReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return r.c.ctrl.List(ctx, list, opts...)
}

func (r workloadReader) QuotaEvent(ctx context.Context, wl *kueue.Workload) *admission.Condition {
	if r.c.kube == nil {
		return nil
	}
	return admission.KueueEventReason(ctx, r.c.kube, wl)
}

// apiReader reads what an explanation needs from the API server.
type apiReader struct{ c kubernetes.Interface }

func (r apiReader) Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	return r.c.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (r apiReader) Nodes(ctx context.Context) ([]*corev1.Node, error) {
	l, err := r.c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return pointers(l.Items), nil
}

func (r apiReader) ActivePods(ctx context.Context) ([]*corev1.Pod, error) {
	l, err := r.c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "status.phase!=Succeeded,status.phase!=Failed"})
	if err != nil {
		return nil, err
	}
	return pointers(l.Items), nil
}

func (r apiReader) Claims(ctx context.Context) ([]*resourceapi.ResourceClaim, error) {
	l, err := r.c.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return pointers(l.Items), nil
}

func (r apiReader) Slices(ctx context.Context) ([]*resourceapi.ResourceSlice, error) {
	l, err := r.c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return pointers(l.Items), nil
}

func (r apiReader) Classes(ctx context.Context) ([]*resourceapi.DeviceClass, error) {
	l, err := r.c.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return pointers(l.Items), nil
}

func pointers[T any](items []T) []*T {
	out := make([]*T, len(items))
	for k := range items {
		out[k] = &items[k]
	}
	return out
}

// claimsReport explains claim/NAME or pod/NAME; a claim not found fails it.
func claimsReport(ctx context.Context, c kubernetes.Interface, ns, kind, name string) (*explain.Report, error) {
	var rep *explain.Report
	var err error
	if kind == "pod" {
		rep, err = explain.Pod(ctx, apiReader{c}, ns, name)
	} else {
		rep, err = explain.Claim(ctx, apiReader{c}, ns, name)
	}
	if err != nil {
		return nil, err
	}
	return rep, rep.Err()
}

func printReport(w io.Writer, rep *explain.Report, output string, show int) error {
	switch output {
	case "json":
		data, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", data)
		return err
	case "yaml":
		data, err := yaml.Marshal(rep)
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	}
	if rep.Workload != nil {
		return printWorkload(w, rep.Workload, rep.Priority, rep.RunsAfter)
	}
	if p := rep.Pod; p != nil {
		out := p.RuledOut()
		if len(out) == 0 {
			fmt.Fprintf(w, "pod %s/%s: the scheduler's node filters rule out none of the %d nodes.\n", p.Namespace, p.Name, len(p.Nodes))
		} else {
			fmt.Fprintf(w, "pod %s/%s: the scheduler's node filters rule out %d of %d nodes before devices:\n", p.Namespace, p.Name, len(out), len(p.Nodes))
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "  NODE\tWHY")
			for _, n := range out {
				fmt.Fprintf(tw, "  %s\t%s\n", n.Node, n.RuledOut)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
	}
	for _, cr := range rep.Claims {
		if cr.Allocated {
			fmt.Fprintf(w, "claim %s/%s is allocated", cr.Namespace, cr.Name)
			if cr.NodeSelector != "" {
				fmt.Fprintf(w, " (node selector %s)", cr.NodeSelector)
			}
			fmt.Fprintln(w, ":")
			for _, d := range cr.Results {
				fmt.Fprintf(w, "  request %s: %s/%s/%s", d.Request, d.Driver, d.Pool, d.Device)
				if cr.MixedVendors() && d.Vendor != "" {
					fmt.Fprintf(w, " (%s)", api.VendorName(d.Vendor))
				}
				fmt.Fprintln(w)
				if d.Usage != nil {
					printUsage(w, d.Usage)
				}
			}
			continue
		}
		fmt.Fprintf(w, "claim %s/%s is not allocated; it fits on %d of %d nodes with devices now.\n", cr.Namespace, cr.Name, cr.FitsOn, len(cr.Nodes))
		// A pool that mixes vendors gets a VENDOR column.
		vendor := func(string) string { return "" }
		header := "NODE\tFITS\tWHY"
		if cr.MixedVendors() {
			header = "NODE\tFITS\tVENDOR\tWHY"
			vendor = func(node string) string {
				var names []string
				for _, v := range cr.VendorsOf(node) {
					names = append(names, api.VendorName(v))
				}
				return cmp.Or(strings.Join(names, ","), "-") + "\t"
			}
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, header)
		for k, d := range cr.Nodes {
			if k == show {
				fmt.Fprintf(tw, "(%d more)\t\t\n", len(cr.Nodes)-show)
				break
			}
			fmt.Fprintf(tw, "%s\t%v\t%s%s\n", d.Node, d.Fits, vendor(d.Node), d.Reason)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// conditionMessageMax bounds a Kueue condition message in the table output (Kueue's own
// bound is 32 KiB); -o json and -o yaml carry all of it.
const conditionMessageMax = 1000

// bounded cuts s to at most n bytes, at a rune boundary, saying how much was left out.
func bounded(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d more bytes; -o json shows all)", s[:cut], len(s)-cut)
}

func printWorkload(w io.Writer, r *admission.Report, prio *explain.Priority, after []dependencies.Status) error {
	quota := "quota not reserved"
	if r.QuotaReserved {
		quota = "quota reserved"
	}
	fmt.Fprintf(w, "workload %s/%s (%s)\n", r.Namespace, r.Name, quota)
	if prio != nil {
		fmt.Fprintf(w, "priority: %s\n", prio)
	}
	if len(after) > 0 {
		names := make([]string, len(after))
		for k, s := range after {
			names[k] = s.String()
		}
		fmt.Fprintf(w, "runs after: %s\n", strings.Join(names, ", "))
	}
	if q := r.Quota; q != nil {
		fmt.Fprintf(w, "kueue: %s=%s %s", q.Type, q.Status, q.Reason)
		if q.Message != "" {
			fmt.Fprintf(w, ": %s", bounded(strings.Join(strings.Fields(q.Message), " "), conditionMessageMax))
		}
		fmt.Fprintln(w)
	}
	if c := r.Check; c != nil {
		fmt.Fprintf(w, "check %s: %s", c.Name, c.State)
		if c.Message != "" {
			fmt.Fprintf(w, ": %s", c.Message)
		}
		fmt.Fprintln(w)
	} else {
		fmt.Fprintln(w, "no admission check of the Workload names controller gpudra.dev/topology")
	}
	fmt.Fprintf(w, "now it would answer %s: %s\n", r.Now.State, r.Now.Message)
	if r.TerminatingPods > 0 {
		fmt.Fprintf(w, "%d terminating pods still hold devices; the check waits for them before answering Retry\n", r.TerminatingPods)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POD SET\tPODS\tCLAIM TEMPLATES\tREQUIRED\tDOMAIN\tNODES\tLEFT OUT\tFITS ALONE\tPLANNED")
	for _, ps := range r.PodSets {
		required := ps.Required
		if required == "" {
			required = "-"
		}
		required += unitsText(ps)
		templates := strings.Join(ps.ClaimTemplates, ",")
		if templates == "" {
			templates = "-"
		}
		if extra := ps.Claims - len(ps.ClaimTemplates); extra > 0 {
			templates += fmt.Sprintf(" +%d extended", extra)
		}
		for _, d := range ps.Domains {
			name := d.Name
			if name == "" {
				name = "(cluster)"
			}
			planned := ""
			if ps.Planned != nil && ps.Planned.Domain == d.Name {
				planned = strings.Join(ps.Planned.Nodes, ",")
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\t%d\t%d of %d\t%s\n", ps.Name, ps.Count, templates, required, name, len(d.Nodes), len(d.LeftOut), d.Fits, ps.Count, planned)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, ps := range r.PodSets {
		for _, d := range ps.Domains {
			for _, n := range d.LeftOut {
				fmt.Fprintf(w, "  %s: %s left out: %s\n", ps.Name, n.Node, n.Reason)
			}
			for _, line := range d.Data {
				fmt.Fprintf(w, "  %s: %s\n", ps.Name, line)
			}
		}
		if ps.Planned != nil {
			for _, note := range ps.Planned.Notes {
				fmt.Fprintf(w, "  %s: %s\n", ps.Name, note)
			}
		}
	}
	return nil
}

// unitsText is a pod set's slices and subslices: " (slices of 16 per tor by its
// oversubscription, subslices of 4 per hostname)".
func unitsText(ps admission.PodSetReport) string {
	var parts []string
	add := func(what string, size int, required, network string) {
		switch {
		case size == 0:
		case network != "":
			parts = append(parts, fmt.Sprintf("%s of %d per %s by its oversubscription", what, size, network))
		default:
			parts = append(parts, fmt.Sprintf("%s of %d per %s", what, size, required))
		}
	}
	add("slices", ps.SliceSize, ps.SliceRequired, ps.SliceNetwork)
	add("subslices", ps.SubsliceSize, ps.SubsliceRequired, ps.SubsliceNetwork)
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
