package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlfake "sigs.k8s.io/controller-runtime/pkg/client/fake"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/deployments"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/driver/simulated"
	"github.com/gpudra/gpudra/internal/explain"
	"github.com/gpudra/gpudra/queueing/admission"
	"github.com/gpudra/gpudra/queueing/dependencies"
	"github.com/gpudra/gpudra/topology"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

func TestExplainPendingClaim(t *testing.T) {
	var objs []runtime.Object
	classes, err := deployments.DeviceClasses()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range classes {
		objs = append(objs, c)
	}
	for _, n := range []string{"l40s-a", "l40s-b"} {
		_, slices, err := simulated.Slices("l40s-pcie", n, driver.RenderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range slices {
			objs = append(objs, s)
		}
	}
	spec, err := allocation.ParseClaimSpec([]byte(`
devices:
  requests:
  - name: pair
    exactly: {deviceClassName: nvlink-group.gpudra.dev}
`))
	if err != nil {
		t.Fatal(err)
	}
	objs = append(objs, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "tp", UID: "u1"}, Spec: spec})
	var out bytes.Buffer
	if err := explainText(context.Background(), &out, fake.NewClientset(objs...), "ml", "claim", "tp", 5); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"claim ml/tp is not allocated; it fits on 0 of 2 nodes", "l40s-a", "request pair: 0 devices here match"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// realNode is one node with slices for one L40S machine; mutate changes the Node.
func realNode(t *testing.T, mutate func(*corev1.Node)) []runtime.Object {
	t.Helper()
	var objs []runtime.Object
	classes, err := deployments.DeviceClasses()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range classes {
		objs = append(objs, c)
	}
	_, slices, err := simulated.Slices("l40s-pcie", "r1-real", driver.RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slices {
		objs = append(objs, s)
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "r1-real", Labels: map[string]string{"kubernetes.io/hostname": "r1-real", "pool": "gpu"}}}
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110")}
	if mutate != nil {
		mutate(n)
	}
	spec, err := allocation.ParseClaimSpec([]byte(`
devices:
  requests:
  - name: gpu
    exactly: {deviceClassName: gpu.gpudra.dev}
`))
	if err != nil {
		t.Fatal(err)
	}
	return append(objs, n, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "one-gpu", UID: "c1"}, Spec: spec})
}

// gpuPod is a pending pod using claim one-gpu; mutate changes it.
func gpuPod(mutate func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "trainer", UID: "p1"}}
	p.Spec.Containers = []corev1.Container{{Name: "main", Image: "trainer"}}
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("one-gpu")}}
	if mutate != nil {
		mutate(p)
	}
	return p
}

// fitsColumnTrue matches a table row whose FITS column says true.
var fitsColumnTrue = regexp.MustCompile(`(?m)^\S+\s+true\s`)

var realNodeTaint = corev1.Taint{Key: "lab.gpudra.dev/real-node", Value: "true", Effect: corev1.TaintEffectNoSchedule}

func explainPod(t *testing.T, objs []runtime.Object) string {
	t.Helper()
	var out bytes.Buffer
	if err := explainText(context.Background(), &out, fake.NewClientset(objs...), "ml", "pod", "trainer", 5); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func TestExplainPodNodeFilters(t *testing.T) {
	tainted := func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{realNodeTaint} }
	for _, tc := range []struct {
		name    string
		node    func(*corev1.Node)
		pod     func(*corev1.Pod)
		extra   []runtime.Object
		want    []string
		fitsNot bool
	}{
		{name: "untolerated taint", node: tainted, fitsNot: true,
			want: []string{"rule out 1 of 1 nodes", "node(s) had untolerated taint(s): lab.gpudra.dev/real-node=true:NoSchedule", "fits on 0 of 1 nodes", "its devices would fit"}},
		{name: "tolerated taint", node: tainted, pod: func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: realNodeTaint.Key, Operator: corev1.TolerationOpExists}}
		}, want: []string{"rule out none of the 1 nodes", "fits on 1 of 1 nodes", "r1-real  true"}},
		{name: "nodeSelector mismatch", pod: func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"pool": "cpu"} }, fitsNot: true,
			want: []string{"node(s) didn't match Pod's node affinity/selector", "fits on 0 of 1 nodes"}},
		{name: "required node affinity mismatch", pod: func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "pool", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"gpu"}}}}}}}}
		}, fitsNot: true, want: []string{"node(s) didn't match Pod's node affinity/selector"}},
		{name: "insufficient cpu", pod: func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
		}, extra: []runtime.Object{&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "busy", UID: "p2"}, Spec: corev1.PodSpec{NodeName: "r1-real",
			Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}}}}}},
			fitsNot: true, want: []string{"Insufficient cpu", "fits on 0 of 1 nodes"}},
		{name: "unschedulable node", node: func(n *corev1.Node) { n.Spec.Unschedulable = true }, fitsNot: true,
			want: []string{"node(s) were unschedulable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := append(realNode(t, tc.node), gpuPod(tc.pod))
			out := explainPod(t, append(objs, tc.extra...))
			for _, want := range tc.want {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			if tc.fitsNot && (fitsColumnTrue.MatchString(out) || strings.Contains(out, "fits: ")) {
				t.Errorf("a ruled-out node is reported as fitting:\n%s", out)
			}
		})
	}
}

func TestExplainJSONReadsBack(t *testing.T) {
	objs := append(realNode(t, func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{realNodeTaint} }), gpuPod(nil))
	rep, err := buildReport(context.Background(), &clients{kube: fake.NewClientset(objs...)}, topology.DefaultLabelKeys, "ml", "pod", "trainer")
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range outputFormats {
		var out bytes.Buffer
		if err := printReport(&out, rep, format, 5); err != nil {
			t.Fatal(err)
		}
		var back explain.Report
		if err := yaml.UnmarshalStrict(out.Bytes(), &back); err != nil {
			t.Fatalf("-o %s does not read back: %v\n%s", format, err, out.String())
		}
		if !reflect.DeepEqual(&back, rep) {
			t.Errorf("-o %s read back differs:\n%s", format, out.String())
		}
		if len(back.Claims) != 1 || back.Claims[0].FitsOn != 0 || !strings.Contains(back.Claims[0].Nodes[0].RuledOut, "untolerated taint") ||
			back.Pod == nil || back.Pod.Nodes[0].RuledOut == "" {
			t.Errorf("-o %s: %+v, want the pod's node ruled out by its taint", format, back)
		}
	}
}

// kueueLab is a fake API server for the admission check: two racks of two 4-GPU H100 nodes,
// the AdmissionCheck, a claim template for all four GPUs of a node, and Workload train
// (two pod sets of 2 pods, each kept in one rack) owned by Job train, its check Retry.
func kueueLab(t *testing.T) client.Reader {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, batchv1.AddToScheme, resourceapi.AddToScheme, kueue.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	objs := []client.Object{&kueue.AdmissionCheck{ObjectMeta: metav1.ObjectMeta{Name: "gpudra-topology"}, Spec: kueue.AdmissionCheckSpec{ControllerName: api.AdmissionCheckController}}}
	classes, err := deployments.DeviceClasses()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range classes {
		objs = append(objs, c)
	}
	for r := 1; r <= 2; r++ {
		for n := 1; n <= 2; n++ {
			name := fmt.Sprintf("r%d-n%d", r, n)
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{api.LabelBlock: "b1", api.LabelRack: fmt.Sprintf("r%d", r), "kubernetes.io/hostname": name}}}
			if name == "r2-n2" {
				node.Spec.Taints = []corev1.Taint{realNodeTaint}
			}
			objs = append(objs, node)
			_, slices, err := simulated.Slices("hgx-h100-4gpu", name, driver.RenderOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range slices {
				objs = append(objs, s)
			}
		}
	}
	spec, err := allocation.ParseClaimSpec([]byte(`
devices:
  requests:
  - name: tp
    exactly: {deviceClassName: gpu.gpudra.dev, count: 4}
`))
	if err != nil {
		t.Fatal(err)
	}
	objs = append(objs, &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "tp4"}, Spec: resourceapi.ResourceClaimTemplateSpec{Spec: spec}})
	wl := &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "job-train-1a2b3", UID: "w1",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "train", UID: "j1"}}}}
	for _, ps := range []string{"dp0", "dp1"} {
		wl.Spec.PodSets = append(wl.Spec.PodSets, kueue.PodSet{Name: kueue.PodSetReference(ps), Count: 2, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{api.AnnotationRequiredTopology: "rack"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "trainer"}},
				ResourceClaims: []corev1.PodResourceClaim{{Name: "tp", ResourceClaimTemplateName: ptr.To("tp4")}}},
		}})
	}
	wl.Status.Conditions = []metav1.Condition{{Type: kueue.WorkloadQuotaReserved, Status: metav1.ConditionTrue, Reason: "QuotaReserved", LastTransitionTime: metav1.Now()}}
	wl.Status.AdmissionChecks = []kueue.AdmissionCheckState{{Name: "gpudra-topology", State: kueue.CheckStateRetry,
		Message: "podSet dp1 (2 pods) does not fit in any single rack: b1/r2 fits 1 of 2"}}
	objs = append(objs, wl)
	return ctrlfake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(&kueue.Workload{}).Build()
}

func TestExplainWorkload(t *testing.T) {
	c := &clients{ctrl: kueueLab(t)}
	for _, arg := range [][2]string{{"workload", "job-train-1a2b3"}, {"job", "train"}} {
		t.Run(arg[0], func(t *testing.T) {
			rep, err := buildReport(context.Background(), c, topology.DefaultLabelKeys, "team-a", arg[0], arg[1])
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := printReport(&out, rep, "", 5); err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{
				"workload team-a/job-train-1a2b3 (quota reserved)",
				"check gpudra-topology: Retry: podSet dp1 (2 pods) does not fit in any single rack: b1/r2 fits 1 of 2",
				"now it would answer Retry: podSet dp1 (2 pods) does not fit in any single rack",
				"dp0      2     tp4              rack      b1/r1   2      0         2 of 2",
				"dp0      2     tp4              rack      b1/r2   2      1         1 of 2",
				"dp1: r2-n2 left out: node(s) had untolerated taint(s): lab.gpudra.dev/real-node=true:NoSchedule",
			} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
			if strings.Contains(out.String(), "kueue:") {
				t.Errorf("a Kueue condition shown with quota reserved:\n%s", out.String())
			}
			out.Reset()
			if err := printReport(&out, rep, "json", 5); err != nil {
				t.Fatal(err)
			}
			var back explain.Report
			if err := json.Unmarshal(out.Bytes(), &back); err != nil || !reflect.DeepEqual(&back, rep) {
				t.Errorf("-o json does not read back (%v):\n%s", err, out.String())
			}
			if w := back.Workload; w == nil || len(w.PodSets) != 2 || w.PodSets[1].Domains[1].Fits != 1 || !w.PodSets[1].Domains[0].Fit {
				t.Errorf("report %+v, want dp1 to fit in rack 1 and 1 of 2 in rack 2", w)
			}
		})
	}
	if _, err := buildReport(context.Background(), c, topology.DefaultLabelKeys, "team-a", "job", "missing"); err == nil || !strings.Contains(err.Error(), "owned by Job missing") {
		t.Errorf("job/missing: %v, want no Workload owned by it", err)
	}
}

// jobset/NAME, pytorchjob/NAME, tfjob/NAME and trainjob/NAME are the Workloads Kueue made for the
// JobSet, PyTorchJob, TFJob or TrainJob of that name, not for a Job of the same name; the names explain completes for each kind
// are the jobs of that kind that have Workloads.
func TestExplainJobKinds(t *testing.T) {
	ctrl := kueueLab(t)
	ctx := context.Background()
	var wl kueue.Workload
	if err := ctrl.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "job-train-1a2b3"}, &wl); err != nil {
		t.Fatal(err)
	}
	for _, o := range []struct{ name, apiVersion, kind string }{
		{"jobset-train-9z8y7", "jobset.x-k8s.io/v1alpha2", "JobSet"},
		{"pytorchjob-train-5x6w7", "kubeflow.org/v1", "PyTorchJob"},
		{"tfjob-train-3c4d5", "kubeflow.org/v1", "TFJob"},
		{"trainjob-train-7e8f9", "trainer.kubeflow.org/v1alpha1", "TrainJob"},
	} {
		other := wl.DeepCopy()
		other.ObjectMeta = metav1.ObjectMeta{Namespace: "team-a", Name: o.name, UID: types.UID(o.name),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: o.apiVersion, Kind: o.kind, Name: "train", UID: types.UID("uid-" + o.name)}}}
		if err := ctrl.(client.Client).Create(ctx, other); err != nil {
			t.Fatal(err)
		}
	}
	c := &clients{ctrl: ctrl}
	for kind, want := range map[string]string{"job": "job-train-1a2b3", "jobset": "jobset-train-9z8y7", "pytorchjob": "pytorchjob-train-5x6w7", "tfjob": "tfjob-train-3c4d5", "trainjob": "trainjob-train-7e8f9"} {
		rep, err := buildReport(ctx, c, topology.DefaultLabelKeys, "team-a", kind, "train")
		if err != nil || rep.Workload == nil || rep.Workload.Name != want {
			t.Errorf("%s/train explained %+v (%v), want Workload %s", kind, rep, err, want)
		}
		if kind == "job" {
			continue
		}
		names, err := objectNames(ctx, c, "team-a", kind)
		if err != nil || !reflect.DeepEqual(names, []string{"train"}) {
			t.Errorf("%s names %v (%v), want [train]", kind, names, err)
		}
	}
	if _, err := buildReport(ctx, c, topology.DefaultLabelKeys, "team-a", "jobset", "missing"); err == nil || !strings.Contains(err.Error(), "owned by JobSet missing") {
		t.Errorf("jobset/missing: %v, want no Workload owned by it", err)
	}
}

// TestExplainWorkloadShowsKueuesRefusal: while Kueue has not reserved quota, explain says
// why, in Kueue's words; a long message is cut in the table and whole in JSON.
// A Workload waiting for quota whose QuotaReserved condition Kueue lost: explain gives the
// reason from the last Pending warning Kueue recorded on it.
func TestExplainWorkloadFallsBackOnKueuesPendingEvent(t *testing.T) {
	c := kueueLab(t).(client.Client)
	var wl kueue.Workload
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "team-a", Name: "job-train-1a2b3"}, &wl); err != nil {
		t.Fatal(err)
	}
	wl.UID = "wl-uid"
	wl.Status.Conditions = nil
	wl.Status.AdmissionChecks[0].State = kueue.CheckStatePending
	if err := c.Status().Update(context.Background(), &wl); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(&wl), &wl); err != nil {
		t.Fatal(err)
	}
	event := func(name, reason, msg string, at time.Time) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name}, Type: corev1.EventTypeWarning, Reason: reason, Message: msg,
			InvolvedObject: corev1.ObjectReference{Kind: "Workload", Namespace: "team-a", Name: wl.Name, UID: wl.UID}, LastTimestamp: metav1.NewTime(at)}
	}
	now := time.Now()
	kube := fake.NewClientset(
		event("old", "Pending", "couldn't assign flavors to pod set main: insufficient unused quota for gpudra.dev/gpu-percent in flavor f, 100 more needed", now.Add(-time.Minute)),
		event("new", "Pending", "couldn't assign flavors to pod set main: insufficient unused quota for gpudra.dev/gpu-percent in flavor f, 50 more needed", now))
	rep, err := buildReport(context.Background(), &clients{ctrl: c, kube: kube}, topology.DefaultLabelKeys, "team-a", "workload", "job-train-1a2b3")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := printReport(&out, rep, "", 5); err != nil {
		t.Fatal(err)
	}
	want := "kueue: QuotaReserved=False Pending (from Kueue's event): couldn't assign flavors to pod set main: insufficient unused quota for gpudra.dev/gpu-percent in flavor f, 50 more needed\n"
	if !strings.Contains(out.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, out.String())
	}
}

func TestExplainWorkloadShowsKueuesRefusal(t *testing.T) {
	firstAvailable := "spec.podSets[0].template.spec.resourceClaims[0].devices.requests[0]: Invalid value: null: FirstAvailable device selection is not supported"
	long := "couldn't assign flavors to pod set dp0: insufficient unused quota for gpudra.dev/gpu-percent in flavor default, " + strings.Repeat("0123456789", 200)
	for _, tc := range []struct {
		what, reason, message string
		want                  []string
	}{
		{"a claim template Kueue cannot charge", kueue.WorkloadInadmissible, firstAvailable, []string{
			"workload team-a/job-train-1a2b3 (quota not reserved)\n",
			"kueue: QuotaReserved=False Inadmissible: " + firstAvailable + "\n",
		}},
		{"a message over the bound", kueue.WorkloadPending, long, []string{
			"kueue: QuotaReserved=False Pending: couldn't assign flavors to pod set dp0: insufficient unused quota for gpudra.dev/gpu-percent",
			fmt.Sprintf("… (%d more bytes; -o json shows all)\n", len(long)-1000),
		}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			c := kueueLab(t).(client.Client)
			var wl kueue.Workload
			if err := c.Get(context.Background(), client.ObjectKey{Namespace: "team-a", Name: "job-train-1a2b3"}, &wl); err != nil {
				t.Fatal(err)
			}
			wl.Status.Conditions = []metav1.Condition{{Type: kueue.WorkloadQuotaReserved, Status: metav1.ConditionFalse, Reason: tc.reason, Message: tc.message, LastTransitionTime: metav1.Now()}}
			wl.Status.AdmissionChecks[0].State = kueue.CheckStatePending
			if err := c.Status().Update(context.Background(), &wl); err != nil {
				t.Fatal(err)
			}
			table, js := teamAReport(t, &clients{ctrl: c}, "workload", "job-train-1a2b3")
			for _, want := range tc.want {
				if !strings.Contains(table, want) {
					t.Errorf("output lacks %q:\n%s", want, table)
				}
			}
			if line, _, _ := strings.Cut(table[strings.Index(table, "kueue:"):], "\n"); len(line) > 1100 {
				t.Errorf("Kueue's line is %d bytes long, want it bounded", len(line))
			}
			var back explain.Report
			if err := json.Unmarshal([]byte(js), &back); err != nil || back.Workload == nil || back.Workload.Quota == nil ||
				back.Workload.Quota.Reason != tc.reason || back.Workload.Quota.Message != tc.message {
				t.Errorf("-o json (%v): %s, want Kueue's whole condition", err, js)
			}
		})
	}
}

// noCluster keeps the tests from reading the user's kubeconfig.
func noCluster(t *testing.T) {
	t.Helper()
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	t.Setenv("HOME", t.TempDir())
}

func TestInvokedAsKubectlPlugin(t *testing.T) {
	noCluster(t)
	if got := displayName("/usr/local/bin/gpudra"); got != "gpudra" {
		t.Errorf("displayName(gpudra) = %q", got)
	}
	root := &cobra.Command{Use: "gpudra"}
	root.AddCommand(newExplainCommand())
	setDisplayName(root, displayName("/home/me/bin/kubectl-gpudra"))
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"explain", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Usage:\n  kubectl gpudra explain (claim/NAME", "  kubectl gpudra explain claim/nvlink-quad -n gpudra-demo", "--kubeconfig", "--context", "--as ", "--server", "--request-timeout", "-n, --namespace", "-o, --output"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "\n  gpudra ") {
		t.Errorf("usage still names the tool gpudra:\n%s", out.String())
	}
}

func TestExplainCompletion(t *testing.T) {
	noCluster(t)
	objs := append(realNode(t, nil), gpuPod(nil))
	fakeConnect := func(*clientFlags) (*clients, error) {
		return &clients{kube: fake.NewClientset(objs...), ctrl: kueueLab(t)}, nil
	}
	complete := func(args ...string) string {
		root := &cobra.Command{Use: "gpudra"}
		root.AddCommand(newExplainCommandWith(fakeConnect))
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(io.Discard)
		root.SetArgs(append([]string{cobra.ShellCompRequestCmd, "explain"}, args...))
		if err := root.Execute(); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{""}, []string{"claim/\n", "pod/\n", "workload/\n", "job/\n"}},
		{[]string{"-n", "ml", "pod/tr"}, []string{"pod/trainer\n"}},
		{[]string{"-n", "ml", "claim/"}, []string{"claim/one-gpu\n"}},
		{[]string{"-n", "team-a", "workload/"}, []string{"workload/job-train-1a2b3\n"}},
		{[]string{"-o", ""}, []string{"json\n", "yaml\n"}},
	} {
		got := complete(tc.args...)
		for _, want := range tc.want {
			if !strings.Contains(got, want) {
				t.Errorf("completing %q: %q lacks %q", tc.args, got, want)
			}
		}
	}
}

func TestExplainFlagErrors(t *testing.T) {
	noCluster(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"deployment/x"}, `"deployment/x": want KIND/NAME with KIND one of claim, pod, workload, job`},
		{[]string{"pod/x", "-o", "wide"}, `--output "wide": accepted values are json, yaml`},
		{[]string{"pod/x", "--nodes", "0"}, "--nodes 0: must be at least 1"},
	} {
		cmd := newExplainCommandWith(func(*clientFlags) (*clients, error) { return nil, fmt.Errorf("no cluster in this test") })
		cmd.SetArgs(tc.args)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestExplainAllocatedClaimShowsDeviceUsage(t *testing.T) {
	objs := realNode(t, nil)
	var pool string
	for _, o := range objs {
		if s, ok := o.(*resourceapi.ResourceSlice); ok {
			pool = s.Spec.Pool.Name
		}
	}
	claim := objs[len(objs)-1].(*resourceapi.ResourceClaim)
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "gpu", Driver: api.DriverName, Pool: pool, Device: "gpu-0"},
		{Request: "gpu", Driver: api.DriverName, Pool: pool, Device: "gpu-1"},
	}}}
	data := `{"usage":{"memoryUsedBytes":3221225472,"memoryLimitBytes":4294967296,"smUtilizationPercent":25,"computeGuaranteePercent":30,"computeCapPercent":50,"heldBackSeconds":95,"processes":1,"observedAt":"2026-01-02T03:04:05Z"}}`
	claim.Status.Devices = []resourceapi.AllocatedDeviceStatus{
		{Driver: api.DriverName, Pool: pool, Device: "gpu-0", Data: &runtime.RawExtension{Raw: []byte(data)}},
		{Driver: "other.example.com", Pool: pool, Device: "gpu-1", Data: &runtime.RawExtension{Raw: []byte(data)}},
	}
	var out bytes.Buffer
	if err := explainText(context.Background(), &out, fake.NewClientset(objs...), "ml", "claim", "one-gpu", 5); err != nil {
		t.Fatal(err)
	}
	want := "  request gpu: gpu.gpudra.dev/" + pool + "/gpu-0\n" +
		"    uses 3.0 of 4.0 GiB memory, SM 25% (guaranteed 30%, cap 50%), held back 1m35s by High shares, 1 process, as of 2026-01-02T03:04:05Z\n" +
		"  request gpu: gpu.gpudra.dev/" + pool + "/gpu-1\n"
	if !strings.HasSuffix(out.String(), want) {
		t.Errorf("output:\n%s\nwant it to end with:\n%s", out.String(), want)
	}
}

// A usage whose memory NVML could not tell has no memoryUsedBytes: shown as unknown, not 0.
func TestExplainShowsUnknownMemoryUse(t *testing.T) {
	var out bytes.Buffer
	printUsage(&out, &explain.DeviceUsage{DeviceUsage: api.DeviceUsage{MemoryLimitBytes: 4 << 30, Processes: 1}})
	if got, want := out.String(), "    uses ? of 4.0 GiB memory, 1 process"; !strings.HasPrefix(got, want) {
		t.Errorf("printUsage = %q, want it to begin with %q", got, want)
	}
}

// TestExplainWorkloadSaysWhichToRRule: a pod set's two levels of slices and the ToR rule's
// notes on the plan are shown.
func TestExplainWorkloadSaysWhichToRRule(t *testing.T) {
	note := "slices of 16 kept under one ToR (required: b1/r1/tor-a uplinks oversubscribed 3:1)"
	rep := &admission.Report{Namespace: "team-a", Name: "job-train", QuotaReserved: true,
		Now: admission.CheckState{State: "Ready", Message: "gang fits: main: " + note + "; 32 pods placed"},
		PodSets: []admission.PodSetReport{{Name: "main", Count: 32, Claims: 1, Required: "block",
			SliceSize: 16, SliceNetwork: "tor", SubsliceSize: 4, SubsliceRequired: "hostname",
			Domains: []admission.DomainReport{{Name: "b1", Nodes: []string{"r1-n1"}, Fits: 32, Fit: true}},
			Planned: &admission.Planned{Domain: "b1", Nodes: []string{"r1-n1"}, Notes: []string{note}}}}}
	var out bytes.Buffer
	if err := printWorkload(&out, rep, nil, nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"block (slices of 16 per tor by its oversubscription, subslices of 4 per hostname)",
		"  main: " + note,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestExplainWorkloadSaysWhereDataIsCached: each domain's dataset line, and the planned
// domain's with how many pods read it locally, are shown.
func TestExplainWorkloadSaysWhereDataIsCached(t *testing.T) {
	planned := "dataset team-a/imagenet cached on 3 of 4 nodes of b1/r2; 3 of 4 pods planned there"
	rep := &admission.Report{Namespace: "team-a", Name: "job-train", QuotaReserved: true,
		Now: admission.CheckState{State: "Ready", Message: "gang fits: workers in rack b1/r2; workers: " + planned + "; 4 pods placed"},
		PodSets: []admission.PodSetReport{{Name: "workers", Count: 4, Claims: 1, Required: "rack",
			Domains: []admission.DomainReport{
				{Name: "b1/r1", Nodes: []string{"r1-n1"}, Fits: 4, Fit: true, Data: []string{"dataset team-a/imagenet cached on 0 of 4 nodes of b1/r1"}},
				{Name: "b1/r2", Nodes: []string{"r2-n1"}, Fits: 4, Fit: true, Data: []string{"dataset team-a/imagenet cached on 3 of 4 nodes of b1/r2"}},
			},
			Planned: &admission.Planned{Domain: "b1/r2", Nodes: []string{"r2-n1", "r2-n2", "r2-n3", "r2-n4"}, Notes: []string{planned}}}}}
	var out bytes.Buffer
	if err := printWorkload(&out, rep, nil, nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"  workers: dataset team-a/imagenet cached on 0 of 4 nodes of b1/r1\n",
		"  workers: dataset team-a/imagenet cached on 3 of 4 nodes of b1/r2\n",
		"  workers: " + planned,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// teamAReport explains kind/name of namespace team-a and returns the report as a table
// and as JSON.
func teamAReport(t *testing.T, c *clients, kind, name string) (table, js string) {
	t.Helper()
	rep, err := buildReport(context.Background(), c, topology.DefaultLabelKeys, "team-a", kind, name)
	if err != nil {
		t.Fatal(err)
	}
	var out [2]bytes.Buffer
	for i, format := range []string{"", "json"} {
		if err := printReport(&out[i], rep, format, 5); err != nil {
			t.Fatal(err)
		}
	}
	return out[0].String(), out[1].String()
}

// A Workload whose Job runs after others shows the chain, each dependency with where it
// stands, in the table and in JSON.
func TestExplainWorkloadShowsWhatItsJobRunsAfter(t *testing.T) {
	c := kueueLab(t).(client.Client)
	ctx := context.Background()
	train := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "train",
		Annotations: map[string]string{dependencies.RunAfterAnnotation: "preprocess,fetch", dependencies.AdmissionGatedBy: dependencies.Gate}}}
	preprocess := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "preprocess"},
		Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}}}
	for _, j := range []*batchv1.Job{train, preprocess} {
		if err := c.Create(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	table, js := teamAReport(t, &clients{ctrl: c}, "job", "train")
	if want := "workload team-a/job-train-1a2b3 (quota reserved)\npriority: 0 (no priority class)\nruns after: preprocess (Complete), fetch (not created yet)\n"; !strings.HasPrefix(table, want) {
		t.Errorf("output does not start with %q:\n%s", want, table)
	}
	if want := `"runsAfter": [`; !strings.Contains(js, want) || !strings.Contains(js, `"phase": "not created yet"`) {
		t.Errorf("JSON lacks the chain:\n%.400s", js)
	}
}

// A Workload whose priority Kueue took from its pods' PriorityClass says so, in the table
// and in JSON.
func TestExplainWorkloadShowsItsPriorityAndClass(t *testing.T) {
	c := kueueLab(t).(client.Client)
	ctx := context.Background()
	var wl kueue.Workload
	if err := c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "job-train-1a2b3"}, &wl); err != nil {
		t.Fatal(err)
	}
	wl.Spec.Priority, wl.Spec.PriorityClassRef = ptr.To[int32](1000), kueue.NewPodPriorityClassRef("high")
	if err := c.Update(ctx, &wl); err != nil {
		t.Fatal(err)
	}
	table, js := teamAReport(t, &clients{ctrl: c}, "job", "train")
	if want := "workload team-a/job-train-1a2b3 (quota reserved)\npriority: 1000 (PriorityClass high)\n"; !strings.HasPrefix(table, want) {
		t.Errorf("output does not start with %q:\n%s", want, table)
	}
	var got struct{ Priority explain.Priority }
	if err := json.Unmarshal([]byte(js), &got); err != nil {
		t.Fatal(err)
	}
	if want := (explain.Priority{Value: 1000, Kind: "PriorityClass", Class: "high"}); got.Priority != want {
		t.Errorf("JSON priority %+v, want %+v", got.Priority, want)
	}
}
