//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/lab"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// TestConfigWebhookRefusesInvalidConfigs: gpudra-controller's webhook refuses a claim,
// a claim template and a DeviceClass whose gpudra config is invalid when they are written,
// with the field path and the accepted values; valid configs and other drivers pass.
func TestConfigWebhookRefusesInvalidConfigs(t *testing.T) {
	inLane(t, clusterLane)
	if !state.Kueue {
		labLacks(t, "Kueue: gpudra-controller runs in labs with Kueue")
	}
	ns := namespace(t, "e2e-webhook")
	bad := `{"apiVersion":"gpu.gpudra.dev/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"Forever"}}}`
	good := strings.Replace(bad, "Forever", "Long", 1)
	claimWith := func(name, driver, params string) *resourcev1.ResourceClaim {
		c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		c.Spec.Devices.Requests = []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.gpudra.dev"}}}
		c.Spec.Devices.Config = []resourcev1.DeviceClaimConfiguration{{DeviceConfiguration: resourcev1.DeviceConfiguration{
			Opaque: &resourcev1.OpaqueDeviceConfiguration{Driver: driver, Parameters: runtimeRaw(params)}}}}
		return c
	}
	_, err := client.ResourceV1().ResourceClaims(ns).Create(t.Context(), claimWith("bad", api.DriverName, bad), metav1.CreateOptions{})
	for _, want := range []string{"spec.devices.config[0].opaque.parameters.sharing.timeSlicing.interval", `"Forever"`, `"Long"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("invalid claim config: err = %v, want it to mention %s", err, want)
		}
	}
	if _, err := client.ResourceV1().ResourceClaims(ns).Create(t.Context(), claimWith("good", api.DriverName, good), metav1.CreateOptions{}); err != nil {
		t.Errorf("valid config refused: %v", err)
	}
	if _, err := client.ResourceV1().ResourceClaims(ns).Create(t.Context(), claimWith("other", "other.example.com", `{"x": 1}`), metav1.CreateOptions{}); err != nil {
		t.Errorf("another driver's config refused: %v", err)
	}
	tmpl := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: ns},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: claimWith("x", api.DriverName, bad).Spec}}
	if _, err := client.ResourceV1().ResourceClaimTemplates(ns).Create(t.Context(), tmpl, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "spec.spec.devices.config[0]") {
		t.Errorf("invalid template: err = %v", err)
	}
	class := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "e2e-bad-config.gpudra.dev"}}
	class.Spec.Config = []resourcev1.DeviceClassConfiguration{{DeviceConfiguration: resourcev1.DeviceConfiguration{
		Opaque: &resourcev1.OpaqueDeviceConfiguration{Driver: api.DriverName, Parameters: runtimeRaw(`{"apiVersion":"gpu.gpudra.dev/v1alpha1","kind":"GpuConfig","sharng":{}}`)}}}}
	if _, err := client.ResourceV1().DeviceClasses().Create(t.Context(), class, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "sharng") {
		t.Errorf("invalid DeviceClass config: err = %v", err)
	}
}

// TestExplainNamesWhatFails: a pod whose claim no node can satisfy stays pending, and
// `gpudra explain` says so, naming the failing request and the closest nodes.
func TestExplainNamesWhatFails(t *testing.T) {
	inLane(t, clusterLane)
	ns := namespace(t, "e2e-explain")
	apply(t, `
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: nine-nvlinked, namespace: `+ns+`}
spec:
  devices:
    requests:
    - name: gpus
      exactly: {deviceClassName: gpu.gpudra.dev, count: 9}
    constraints:
    - matchAttribute: gpu.gpudra.dev/nvlinkClique
---
apiVersion: v1
kind: Pod
metadata: {name: trainer, namespace: `+ns+`}
spec:
  resourceClaims: [{name: gpus, resourceClaimName: nine-nvlinked}]
  containers:
  - name: c
    image: registry.k8s.io/pause:3.10
    resources: {claims: [{name: gpus}]}
`)
	eventually(t, time.Minute, "the pod is unschedulable", func(ctx context.Context) error {
		p, err := client.CoreV1().Pods(ns).Get(ctx, "trainer", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if msg := schedulingMessage(p); msg == "" {
			return fmt.Errorf("not marked unschedulable yet")
		}
		return nil
	})
	out, err := exec.CommandContext(t.Context(), gpudraCLI, "explain", "pod/trainer", "-n", ns, "--kubeconfig", lab.Layout{Root: state.Dir}.Kubeconfig()).CombinedOutput()
	if err != nil {
		t.Fatalf("gpudra explain: %v\n%s", err, out)
	}
	for _, want := range []string{"claim " + ns + "/nine-nvlinked is not allocated; it fits on 0 of", "request gpus: 8 devices here match its class and selectors, it needs 9"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("explain output lacks %q:\n%s", want, out)
		}
	}
}

// TestPluginWritesOnlyItsOwnNodesSlices: the admission policies shipped for the kubelet plugin
// let a plugin identity (its ServiceAccount token bound to a pod on node A) write
// ResourceSlices, and MPS control daemon Deployments, of node A only, and such daemons only
// as the chart's plugins make them (testMPSDaemonPolicies).
func TestPluginWritesOnlyItsOwnNodesSlices(t *testing.T) {
	inLane(t, clusterLane)
	if !state.Kueue {
		labLacks(t, "Kueue: the plugin RBAC and policy are installed with gpudra-controller (labs with Kueue)")
	}
	nodeA, nodeB := state.Nodes[0].Name, state.Nodes[1].Name
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plugin-identity-" + nodeA, Namespace: "gpudra"},
		Spec: corev1.PodSpec{NodeName: nodeA, ServiceAccountName: "gpudra-kubelet-plugin",
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
	created, err := client.CoreV1().Pods("gpudra").Create(t.Context(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.CoreV1().Pods("gpudra").Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	tr, err := client.CoreV1().ServiceAccounts("gpudra").CreateToken(t.Context(), "gpudra-kubelet-plugin", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600),
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: created.Name, UID: created.UID}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pc := rest.AnonymousClientConfig(cfg)
	pc.BearerToken = tr.Status.Token
	as, err := kubernetes.NewForConfig(pc)
	if err != nil {
		t.Fatal(err)
	}
	slice := func(node, driver string) *resourcev1.ResourceSlice {
		return &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-identity-"},
			Spec: resourcev1.ResourceSliceSpec{Driver: driver, NodeName: ptr.To(node),
				Pool:    resourcev1.ResourcePool{Name: "e2e-identity-" + node, ResourceSliceCount: 1},
				Devices: []resourcev1.Device{{Name: "probe"}}}}
	}
	own, err := as.ResourceV1().ResourceSlices().Create(t.Context(), slice(nodeA, api.DriverName), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the plugin of %s may not write its own node's slice: %v", nodeA, err)
	}
	if err := as.ResourceV1().ResourceSlices().Delete(t.Context(), own.Name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("the plugin may not delete its own node's slice: %v", err)
	}
	if _, err := as.ResourceV1().ResourceSlices().Create(t.Context(), slice(nodeB, api.DriverName), metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "may not write ResourceSlices of node "+nodeB) {
		t.Errorf("the plugin of %s wrote a slice of %s: err = %v", nodeA, nodeB, err)
	}
	if _, err := as.ResourceV1().ResourceSlices().Create(t.Context(), slice(nodeA, "other.example.com"), metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "only write ResourceSlices of driver gpu.gpudra.dev") {
		t.Errorf("the plugin wrote another driver's slice: err = %v", err)
	}
	if _, err := as.CoreV1().Secrets("gpudra").List(t.Context(), metav1.ListOptions{}); err == nil {
		t.Error("the plugin identity can read Secrets")
	}

	t.Run("MPS control daemons", func(t *testing.T) { testMPSDaemonPolicies(t, as, nodeA, nodeB) })
}

// TestGangAdmissionByRack: with the gpudra.dev/topology check on the ClusterQueue, a Job of
// three 8-GPU pods that must share a rack is never admitted (a lab rack has two 8-GPU nodes)
// and the Workload says why; the same Job asking for one block is admitted, its pods are
// pinned to the planned nodes of that block and run there.
func TestGangAdmissionByRack(t *testing.T) {
	inLane(t, clusterLane)
	if !state.Kueue {
		labLacks(t, "Kueue (lab file kueue.enabled: false)")
	}
	const queue = "e2e-gangs"
	applyForTest(t, decode(t, clusterQueue(queue, true, 64, 64))...)
	ns := namespace(t, "e2e-gangs")
	apply(t, `
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: train, namespace: `+ns+`}
spec: {clusterQueue: `+queue+`}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: eight-gpus, namespace: `+ns+`}
spec:
  spec:
    devices:
      requests:
      - {name: gpus, exactly: {deviceClassName: gpu.gpudra.dev, count: 8}}
`)
	gangJob := func(name, level string) string {
		return `
apiVersion: batch/v1
kind: Job
metadata:
  name: ` + name + `
  namespace: ` + ns + `
  labels: {kueue.x-k8s.io/queue-name: train}
spec:
  parallelism: 3
  completions: 3
  completionMode: Indexed
  template:
    metadata:
      annotations: {gpudra.dev/required-topology: ` + level + `}
    spec:
      restartPolicy: Never
      schedulingGates: [{name: gpudra.dev/placement}]
      resourceClaims: [{name: gpus, resourceClaimTemplateName: eight-gpus}]
      containers:
      - name: worker
        image: registry.k8s.io/pause:3.10
        resources:
          requests: {cpu: 100m}
          claims: [{name: gpus}]
`
	}
	apply(t, gangJob("same-rack", "rack"))
	eventually(t, 2*time.Minute, "the rack-bound gang is refused with a reason", workloadSays(ns, "same-rack", "does not fit in any single rack"))
	eventually(t, time.Minute, "kubectl describe shows the refusal as a Warning on the Workload",
		hasEvent(ns, "Workload", "same-rack", "Warning", "GangDoesNotFit", "does not fit in any single rack"))
	if pods, _ := client.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "job-name=same-rack"}); len(pods.Items) != 0 {
		t.Errorf("%d pods of the unplaceable gang exist", len(pods.Items))
	}
	bg := metav1.DeletePropagationBackground
	if err := dyn().Resource(jobsGVR).Namespace(ns).Delete(t.Context(), "same-rack", metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}

	apply(t, gangJob("same-block", "block"))
	eventually(t, 3*time.Minute, "the block-bound gang is admitted and its three workers run", jobRuns(ns, "same-block", 3))
	pods, err := client.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "job-name=same-block"})
	if err != nil {
		t.Fatal(err)
	}
	blocks, nodes := map[string]bool{}, map[string]bool{}
	for _, p := range pods.Items {
		nodes[p.Spec.NodeName] = true
		blocks[nodeBlock(p.Spec.NodeName)] = true
		if p.Spec.NodeSelector["kubernetes.io/hostname"] != p.Spec.NodeName {
			t.Errorf("pod %s runs on %s but was pinned to %q", p.Name, p.Spec.NodeName, p.Spec.NodeSelector["kubernetes.io/hostname"])
		}
	}
	if len(nodes) != 3 || len(blocks) != 1 {
		t.Errorf("workers on nodes %v in blocks %v, want three nodes of one block", nodes, blocks)
	}
	eventually(t, time.Minute, "the Workload has a GangPlaced Event", hasEvent(ns, "Workload", "same-block", "Normal", "GangPlaced", ""))
	for _, p := range pods.Items {
		eventually(t, time.Minute, "pod "+p.Name+" has an Event naming its node",
			hasEvent(ns, "Pod", p.Name, "Normal", "PinnedToPlannedNode", "pinned to node "+p.Spec.NodeName))
	}
}

// hasEvent: an events.k8s.io Event of the type and reason, whose note contains note, is about
// the object. For a Workload, name is its Job's (the Workload's name is generated).
func hasEvent(ns, kind, name, eventType, reason, note string) func(context.Context) error {
	return func(ctx context.Context) error {
		evs, err := client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var seen []string
		for _, e := range evs.Items {
			if e.Regarding.Kind != kind {
				continue
			}
			if kind == "Workload" && !strings.HasPrefix(e.Regarding.Name, "job-"+name+"-") || kind != "Workload" && e.Regarding.Name != name {
				continue
			}
			seen = append(seen, e.Type+" "+e.Reason+": "+e.Note)
			if e.Type == eventType && e.Reason == reason && strings.Contains(e.Note, note) {
				return nil
			}
		}
		return fmt.Errorf("no %s %s Event about %s %s/%s saying %q (has %q)", eventType, reason, kind, ns, name, note, seen)
	}
}

func nodeBlock(node string) string {
	for _, n := range state.Nodes {
		if n.Name == node {
			return n.Block
		}
	}
	return ""
}

// workloadSays: the Job's Workload mentions text somewhere in its status.
func workloadSays(ns, job, text string) func(context.Context) error {
	return func(ctx context.Context) error {
		wls, err := dyn().Resource(workloadsGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, wl := range wls.Items {
			for _, o := range wl.GetOwnerReferences() {
				if o.Kind == "Job" && o.Name == job {
					status, _ := json.Marshal(wl.Object["status"])
					if strings.Contains(string(status), text) {
						return nil
					}
					return fmt.Errorf("workload %s status does not say %q yet: %s", wl.GetName(), text, status)
				}
			}
		}
		return fmt.Errorf("no workload for job %s yet", job)
	}
}

func runtimeRaw(s string) runtime.RawExtension { return runtime.RawExtension{Raw: []byte(s)} }
