package lab

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/gpudra/gpudra/deployments"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// DemoNamespace is where deployments/examples put their objects.
const DemoNamespace = "gpudra-demo"

// installDeviceClasses creates the DeviceClasses gpudra ships (deployments/deviceclasses).
func installDeviceClasses(ctx context.Context, cs kubernetes.Interface) error {
	classes, err := deployments.DeviceClasses()
	if err != nil {
		return fmt.Errorf("gpudra's DeviceClasses: %w", err)
	}
	for _, dc := range classes {
		if _, err := cs.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create DeviceClass %s: %w", dc.Name, err)
		}
	}
	return nil
}

// DemoOptions configure Demo.
type DemoOptions struct {
	Up Options
	// Examples is the folder of example claims; default <repo>/deployments/examples.
	Examples string
	// Queues is the folder of the Kueue samples the demo's queue step applies and submits;
	// default <repo>/deployments/kueue.
	Queues string
	// Timeout bounds each wait: for every example pod to run, for Kueue to admit the demo's
	// gang and for its answer to the job too big for its queue.
	Timeout time.Duration
}

// Demo brings the lab up (or uses the one running in the same folder), applies the worked
// examples, waits until the scheduler allocated their claims and their pods run, and prints
// what went where. With Kueue it then submits a gang and a job too big for its queue to the
// sample queues (demoQueuesStep).
func Demo(ctx context.Context, opts DemoOptions) error {
	out := opts.Up.Progress
	if out == nil {
		out = os.Stderr
		opts.Up.Progress = out
	}
	if opts.Up.Dir == "" {
		// Without a folder given, show the demo on the machine's running lab, if there is one.
		if opts.Up.Dir = ActiveDir(); opts.Up.Dir == "" {
			opts.Up.Dir = DefaultDir()
		}
	}
	if opts.Timeout == 0 {
		opts.Timeout = 2 * time.Minute
	}
	repo, repoErr := RepoRoot(".")
	if opts.Examples == "" {
		if repoErr != nil {
			return repoErr
		}
		opts.Examples = filepath.Join(repo, "deployments", "examples")
	}
	if opts.Queues == "" && repoErr == nil {
		opts.Queues = filepath.Join(repo, "deployments", "kueue")
	}
	objs, err := ReadManifests(opts.Examples)
	if err != nil {
		return fmt.Errorf("read the examples: %w", err)
	}
	dir, _ := filepath.Abs(opts.Up.Dir)
	s, err := ReadState(dir)
	if err == nil && ActiveDir() == dir {
		fmt.Fprintf(out, "Using the lab already running in %s.\n", dir)
	} else {
		fmt.Fprintln(out, "Starting the gpudra lab: a Kubernetes 1.37 control plane on 127.0.0.1, kwok nodes, Kueue and one gpudra-kubelet-plugin per simulated GPU server.")
		if s, err = Up(ctx, opts.Up); err != nil {
			return err
		}
	}
	cfg, err := s.RESTConfig()
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ap, err := NewApplier(cfg)
	if err != nil {
		return err
	}
	// The README's MIG flow, before the examples: mig-slice.yaml can use the instances.
	if err := demoMIGLayoutStep(ctx, out, cs, s, opts.Timeout); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nApplying the examples in %s:\n", opts.Examples)
	for _, o := range objs {
		fmt.Fprintf(out, "  %s %s\n", strings.ToLower(o.GetKind()), objectName(o))
	}
	if err := ap.Apply(ctx, objs...); err != nil {
		return err
	}
	want := expectedPods(objs)
	fmt.Fprintf(out, "\nWaiting for the scheduler to allocate devices to %d pods...\n", want)
	start := time.Now()
	werr := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, opts.Timeout, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(DemoNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running >= want, nil
	})
	claims, err := ListClaims(ctx, cs, DemoNamespace)
	if err != nil {
		return err
	}
	fmt.Fprintln(out)
	WriteDemoTable(out, claims, s.Nodes)
	if werr != nil {
		printPending(ctx, out, cs)
		return fmt.Errorf("not every example pod runs after %s", opts.Timeout)
	}
	fmt.Fprintf(out, "\nAll %d example pods run (allocated in %s).\n", want, time.Since(start).Round(100*time.Millisecond))
	if err := demoQueuesStep(ctx, out, cs, dyn, ap, s, opts.Queues, opts.Timeout); err != nil {
		return err
	}
	if err := demoRealNode(ctx, out, cs, s, opts.Timeout); err != nil {
		return err
	}
	printNextSteps(out, s)
	return nil
}

// demoRealNodePod is the demo's pod on the real node.
const demoRealNodePod = "real-container"

// demoRealNode runs a pod with a GPU share on the lab's real node and prints what its
// container received, or says why the lab has no real node.
func demoRealNode(ctx context.Context, out io.Writer, cs kubernetes.Interface, s *State, timeout time.Duration) error {
	node, err := s.RealNodeAvailable()
	if err != nil {
		fmt.Fprintf(out, "\nNo real container in this demo: %v\n", err)
		return nil
	}
	fmt.Fprintf(out, "\nOn the real node %s (kubelet + containerd + runc on this machine), a pod with a 10 GiB / 25 %% GPU share:\n", node)
	claim := &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: DemoNamespace, Name: demoRealNodePod},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "share", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: api.DeviceClassShare,
				Capacity: &resourcev1.CapacityRequirements{Requests: map[resourcev1.QualifiedName]resource.Quantity{
					"memory": resource.MustParse("10Gi"), "compute": resource.MustParse("25")}}},
		}}}},
	}
	if _, err := cs.ResourceV1().ResourceClaims(DemoNamespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	pod := RealNodePod(DemoNamespace, demoRealNodePod, node, []corev1.PodResourceClaim{{Name: "share", ResourceClaimName: &claim.Name}})
	if _, err := cs.CoreV1().Pods(DemoNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	var log string
	werr := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		log, _ = PodLog(s, node, DemoNamespace, demoRealNodePod, "probe")
		return strings.Contains(log, "probe-report-done"), nil
	})
	if werr != nil {
		printPending(ctx, out, cs)
		return fmt.Errorf("the pod on real node %s did not report after %s (kubelet log: %s)", node, timeout, Layout{s.Dir}.Log(KubeletComponent(node)))
	}
	fmt.Fprintf(out, "  pod %s/%s: the container sees\n%s", DemoNamespace, demoRealNodePod, indent(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(log), "probe-report-done")), "    "))
	fmt.Fprintln(out)
	return nil
}

// expectedPods counts the pods the examples create: their Pods and their Jobs' parallelism.
func expectedPods(objs []*unstructured.Unstructured) int {
	n := 0
	for _, o := range objs {
		switch o.GetKind() {
		case "Pod":
			n++
		case "Job":
			p, found, _ := unstructured.NestedInt64(o.Object, "spec", "parallelism")
			if !found {
				p = 1
			}
			n += int(p)
		}
	}
	return n
}

// WriteDemoTable prints claim → node (profile) → devices.
func WriteDemoTable(w io.Writer, claims []ClaimStatus, nodes []Node) {
	profile := map[string]string{}
	for _, n := range nodes {
		profile[n.Name] = n.Profile
	}
	for i := range claims {
		if p := profile[claims[i].Node]; p != "" {
			claims[i].Node += " (" + p + ")"
		}
	}
	WriteClaims(w, claims)
}

func printPending(ctx context.Context, w io.Writer, cs kubernetes.Interface) {
	pods, err := cs.CoreV1().Pods(DemoNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning {
			continue
		}
		why := string(p.Status.Phase)
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
				why = c.Reason + ": " + c.Message
			}
		}
		fmt.Fprintf(w, "  pod %s/%s not running: %s\n", p.Namespace, p.Name, why)
	}
}

func printNextSteps(w io.Writer, s *State) {
	kc := Layout{s.Dir}.Kubeconfig()
	dirFlag := ""
	if s.Dir != DefaultDir() {
		dirFlag = " --dir " + s.Dir
	}
	fmt.Fprintf(w, `
Continue with kubectl (any recent one; the lab's own is %[1]s):
  export KUBECONFIG=%[2]s
  kubectl get nodes -L %[3]s,%[4]s,%[5]s
  kubectl get resourceslices
  kubectl get resourceclaims -n %[6]s
  kubectl describe resourceclaim -n %[7]s nvlink-quad%[11]s
  %[9]s lab status%[8]s

Tear the lab down (stops every process it started and removes %[10]s):
  %[9]s lab down%[8]s
`, s.Kubectl, kc, api.LabelRack, api.LabelToR, LabelProfile, DemoNamespace, DemoNamespace, dirFlag, os.Args[0], s.Dir, queueSteps(s))
}

// queueSteps are the next steps' lines about the demo's queues; none without Kueue.
func queueSteps(s *State) string {
	if !s.Kueue {
		return ""
	}
	return fmt.Sprintf("\n  kubectl get clusterqueues,workloads -A\n  %s explain job/%s -n team-b", os.Args[0], DemoTooBigJob)
}
