package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/deployments"
)

// kwokAnnotation marks the nodes kwok manages.
const kwokAnnotation = "kwok.x-k8s.io/node"

// kwokStages are the kwok stages the lab uses. pod-complete is left out on purpose: GPU jobs
// hold their devices until they are deleted, as training jobs do, so Job pods keep running.
var kwokStages = []string{
	"node/fast/node-initialize.yaml",
	"pod/general/pod-create.yaml",
	"pod/general/pod-init-container-running.yaml",
	"pod/general/pod-init-container-completed.yaml",
	"pod/general/pod-ready.yaml",
	"pod/general/pod-delete.yaml",
}

// kwokNodes are the lab's simulated nodes (all but the real ones).
func (u *upper) kwokNodes() []Node {
	var out []Node
	for _, n := range u.state.Nodes {
		if !n.Real {
			out = append(out, n)
		}
	}
	return out
}

func nodeObject(n Node) *corev1.Node {
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(n.Resources.CPU),
		corev1.ResourceMemory: resource.MustParse(n.Resources.Memory),
		corev1.ResourcePods:   *resource.NewQuantity(int64(n.Resources.Pods), resource.DecimalSI),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels(),
			Annotations: map[string]string{kwokAnnotation: "fake"}},
		Status: corev1.NodeStatus{Capacity: res, Allocatable: res},
	}
}

// startNodes creates the Node objects and starts kwok, which makes them Ready and runs their pods.
func (u *upper) startNodes(ctx context.Context) error {
	for _, n := range u.kwokNodes() {
		if err := createNode(ctx, u.client, nodeObject(n)); err != nil {
			return &ComponentError{Component: "kube-apiserver", Log: u.layout.Log("kube-apiserver"), Err: err}
		}
	}
	dir := u.layout.ComponentDir("kwok")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	var stages []string
	for _, s := range kwokStages {
		data, err := os.ReadFile(filepath.Join(u.tc.KwokStages, s))
		if err != nil {
			return fmt.Errorf("kwok stage (from the toolchain cache): %w", err)
		}
		stages = append(stages, strings.TrimSpace(string(data)))
	}
	stageFile := filepath.Join(dir, "stages.yaml")
	if err := os.WriteFile(stageFile, []byte(strings.Join(stages, "\n---\n")+"\n"), 0o600); err != nil {
		return err
	}
	kc, err := u.componentKubeconfig("kwok", kwokUser, mastersGroup)
	if err != nil {
		return err
	}
	port := u.port("kwok")
	argv := []string{u.tc.Kwok, "--kubeconfig=" + kc, "--config=" + stageFile,
		"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=" + kwokAnnotation + "=fake",
		"--server-address=127.0.0.1:" + strconv.Itoa(port), "--cidr=10.244.0.0/16", "--node-ip=127.0.0.1"}
	c, err := u.start("kwok", argv, []string{"HOME=" + dir}, map[string]int{"server": port})
	if err != nil {
		return err
	}
	if err := waitReady(ctx, c, "healthy", componentTimeout, httpGetter("http://127.0.0.1:"+strconv.Itoa(port)+"/healthz", nil, "ok")); err != nil {
		return err
	}
	return waitReady(ctx, c, "marking every node Ready", componentTimeout, func(ctx context.Context) error {
		notReady, err := notReadyNodes(ctx, u.client, u.kwokNodes())
		if err == nil && len(notReady) > 0 {
			err = fmt.Errorf("nodes not Ready yet: %s", strings.Join(notReady, ", "))
		}
		return err
	})
}

// AddKwokNode creates a Node that the lab's kwok makes Ready and runs pods on, labelled with
// n's topology, without a kubelet plugin (benchmarks publish its ResourceSlices themselves).
func AddKwokNode(ctx context.Context, cs kubernetes.Interface, n Node) error {
	return createNode(ctx, cs, nodeObject(n))
}

func createNode(ctx context.Context, cs kubernetes.Interface, node *corev1.Node) error {
	status := node.Status
	created, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create node %s: %w", node.Name, err)
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		created.Status.Capacity, created.Status.Allocatable = status.Capacity, status.Allocatable
		_, err := cs.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			created, _ = cs.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		}
		return err
	})
}

func notReadyNodes(ctx context.Context, cs kubernetes.Interface, nodes []Node) ([]string, error) {
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	ready := map[string]bool{}
	for _, n := range list.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready[n.Name] = true
			}
		}
	}
	var out []string
	for _, n := range nodes {
		if !ready[n.Name] {
			out = append(out, n.Name)
		}
	}
	return out, nil
}

// pluginArgv is the command line of a node's kubelet plugin (the flags of cmd/gpudra-kubelet-plugin).
func (u *upper) pluginArgv(binary string, n Node, kubeconfig string) []string {
	d := u.layout.NodeDir(n.Name)
	argv := []string{binary,
		"--node-name=" + n.Name, "--kubeconfig=" + kubeconfig,
		"--plugin-data-dir=" + filepath.Join(d, "plugin"), "--registrar-dir=" + filepath.Join(d, "registry"),
		"--cdi-root=" + filepath.Join(d, "cdi"), "--checkpoint-dir=" + filepath.Join(d, "checkpoint"),
		// Plain HTTP, on loopback only: the lab's tests scrape it without a token.
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(u.port("metrics-"+n.Name)), "--metrics-secure=false",
		gpudraFeatureGatesFlag(),
	}
	if n.Profile != "" {
		argv = append(argv, "--nvml=sim:"+n.Profile)
	} else {
		argv = append(argv, "--nvml=none")
	}
	if n.KFD != "" {
		argv = append(argv, "--kfd=sim:"+n.KFD)
	}
	if n.MIG != "" {
		argv = append(argv, "--mig="+n.MIG)
	}
	if migLayoutsApply(n.MIG) {
		// The chart's layouts, as the chart mounts them: a node label names one of them.
		argv = append(argv, "--mig-layouts="+u.layout.MIGLayouts())
	}
	return argv
}

// migLayoutsApply says whether a plugin with --mig=mig ("" for the plugin's default,
// static) applies the MIG layout its node's label names.
func migLayoutsApply(mig string) bool { return mig == "" || mig == "static" }

// writeMIGLayouts writes the chart's default MIG layouts where pluginArgv points.
func (u *upper) writeMIGLayouts() error {
	data, err := deployments.MIGLayouts()
	if err != nil {
		return err
	}
	return os.WriteFile(u.layout.MIGLayouts(), data, 0o644)
}

// startPlugins starts one gpudra-kubelet-plugin per node and waits until every node's pool
// of ResourceSlices is complete.
func (u *upper) startPlugins(ctx context.Context, binary string) error {
	if err := u.writeMIGLayouts(); err != nil {
		return err
	}
	var cs []Component
	nodes := u.kwokNodes()
	for _, n := range nodes {
		name := PluginComponent(n.Name)
		for _, sub := range []string{"plugin", "registry", "cdi", "checkpoint"} {
			if err := os.MkdirAll(filepath.Join(u.layout.NodeDir(n.Name), sub), 0o700); err != nil {
				return err
			}
		}
		kc, err := u.componentKubeconfig(name, nodeUserPrefix+n.Name, nodeGroup)
		if err != nil {
			return err
		}
		c, err := u.start(name, u.pluginArgv(binary, n, kc), nil, map[string]int{"metrics": u.port("metrics-" + n.Name)})
		if err != nil {
			return err
		}
		cs = append(cs, c)
	}
	return u.waitPoolsPublished(ctx, nodes, cs)
}

// waitPoolsPublished waits until each node's plugin (cs, in node order) has published
// the node's whole pool of ResourceSlices.
func (u *upper) waitPoolsPublished(ctx context.Context, nodes []Node, cs []Component) error {
	for i, n := range nodes {
		if err := waitReady(ctx, cs[i], "publishing the ResourceSlices of node "+n.Name, componentTimeout, func(ctx context.Context) error {
			return poolPublished(ctx, u.client, n.Name)
		}); err != nil {
			return err
		}
	}
	return nil
}

// PoolPublished says whether node's pool of ResourceSlices is complete, and if not, what is missing.
func PoolPublished(ctx context.Context, cs kubernetes.Interface, node string) error {
	return poolPublished(ctx, cs, node)
}

// poolPublished checks that node's pool is complete: all resourceSliceCount slices of its
// newest generation exist.
func poolPublished(ctx context.Context, cs kubernetes.Interface, node string) error {
	slices, err := NodeSlices(ctx, cs, node)
	if err != nil {
		return err
	}
	if len(slices) == 0 {
		return fmt.Errorf("no ResourceSlice of driver %s for node %s yet", api.DriverName, node)
	}
	want := slices[0].Spec.Pool.ResourceSliceCount
	if int64(len(slices)) != want {
		return fmt.Errorf("node %s: %d of %d ResourceSlices of generation %d", node, len(slices), want, slices[0].Spec.Pool.Generation)
	}
	return nil
}

// NodeSlices returns the newest generation of node's pool (named after the node) of the
// gpudra driver, sorted by slice name.
func NodeSlices(ctx context.Context, cs kubernetes.Interface, node string) ([]resourcev1.ResourceSlice, error) {
	list, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + api.DriverName})
	if err != nil {
		return nil, err
	}
	var newest int64
	var pool []resourcev1.ResourceSlice
	for _, s := range list.Items {
		if s.Spec.Pool.Name == node {
			pool = append(pool, s)
			newest = max(newest, s.Spec.Pool.Generation)
		}
	}
	var out []resourcev1.ResourceSlice
	for _, s := range pool {
		if s.Spec.Pool.Generation == newest {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
