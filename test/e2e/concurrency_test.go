//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/kubeletplugin/checkpoint"
	"github.com/gpudra/gpudra/kubeletplugin/mps"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
	"github.com/gpudra/gpudra/lab"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// mpsConfig puts a claim's GPU under its own MPS control daemon.
const mpsConfig = `{"apiVersion": "gpu.gpudra.dev/v1alpha1", "kind": "GpuConfig", "sharing": {"strategy": "MPS"}}`

// TestRealNodeWholeGPUPreparesWhileMPSClaimWaits: an MPS claim's prepare waits for its
// control daemon's pod, which is held back (its pods cannot be created). Meanwhile the
// kubelet prepares a whole GPU for another pod on the same node, and that pod runs: the
// waiting claim holds up no other claim. Let go, the daemon's pod starts and the MPS pod
// runs; both pods deleted, nothing of either claim is left.
func TestRealNodeWholeGPUPreparesWhileMPSClaimWaits(t *testing.T) {
	inLane(t, realNodeLane)
	node := realNode(t)
	dsNS, _, ok := state.RealNodePluginDaemonSet(node)
	if !ok {
		labLacks(t, "MPS control daemons in pods (install: chart); with install: processes the plugin starts them as its children, so there is no pod to wait for")
	}
	// The test asserts that the MPS pod never fails a prepare: a claim of an earlier test
	// that the kubelet has not unprepared yet (its namespace gone, its devices already
	// deallocated) would make the first try conflict.
	eventually(t, 3*time.Minute, "the real node holds no claim of an earlier test", func(context.Context) error {
		if left := checkpointClaims(t, node); len(left) > 0 {
			return fmt.Errorf("the plugin's checkpoint still has %v", left)
		}
		return nil
	})
	ns := namespace(t, "real-node-mps-wait")
	ctx := t.Context()
	mpsClaim, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, withConfig(claimOf(ns, "mps", api.DeviceClassGPU, nil, ""), mpsConfig), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uid := string(mpsClaim.UID)
	release := holdPods(t, dsNS, api.LabelMPSClaimUID, uid)
	if _, err := client.CoreV1().Pods(ns).Create(ctx, lab.RealNodePod(ns, "mps", node, []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("mps")}}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The plugin has prepared the claim's devices and made its daemon's Deployment; it waits
	// for the daemon's pod, which the ReplicaSet cannot create.
	var rs *appsv1.ReplicaSet
	eventually(t, 2*time.Minute, "the MPS claim waits for its held daemon pod", func(ctx context.Context) error {
		var err error
		if rs, err = heldReplicaSet(ctx, dsNS, uid); err != nil {
			return err
		}
		return mpsPodsOf(ctx, dsNS, uid, 0)
	})

	start := time.Now()
	whole := claimedRealNodePod(t, ns, "whole", node)
	if r := probeOutput(t, ns, "whole"); len(r.gpuNodes()) != 1 {
		t.Fatalf("the whole GPU's container has GPU device nodes %v, want one\n%s", r.gpuNodes(), r.raw)
	}
	t.Logf("a whole GPU was prepared and its pod runs %s after it was created, while the MPS claim waits", time.Since(start).Round(100*time.Millisecond))
	if err := podRunning(ns, "mps")(ctx); err == nil {
		t.Fatal("the MPS pod runs, but its control daemon's pod is held back")
	}
	if err := mpsPodsOf(ctx, dsNS, uid, 0); err != nil {
		t.Fatalf("the hold let the daemon's pod through: %v", err)
	}
	// Still waiting, not failed: the kubelet reported no failed prepare of the MPS pod.
	events, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=mps,type=Warning"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		t.Errorf("the MPS pod, while its claim waits: %s: %s", e.Reason, e.Message)
	}

	release(rs)
	r := probeOutput(t, ns, "mps")
	if !r.files["/tmp/nvidia-mps/"+mps.SimulatedFile] || len(r.gpuNodes()) != 1 {
		t.Errorf("the MPS pod runs without its daemon in its pipe directory or its GPU (files %v, GPUs %v)", r.files, r.gpuNodes())
	}

	for _, p := range []string{"whole", "mps"} {
		if err := client.CoreV1().Pods(ns).Delete(ctx, p, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 3*time.Minute, "both claims are unprepared and nothing of them is left on the node", func(ctx context.Context) error {
		return leftOnNode(ctx, t, node, dsNS, ns, []types.UID{mpsClaim.UID, whole.UID})
	})
}

// TestRealNodeManyClaimsAtOnce: as many pods as the real node has room for, each with a
// claim (MIG slices, and shares each under its own MPS control daemon), are created at
// once. The kubelet prepares every claim and every container gets its device; all deleted
// at once, every claim is unprepared and nothing is left: no CDI spec names a claim, the
// plugin's checkpoint holds none, no MPS directory or daemon remains.
func TestRealNodeManyClaimsAtOnce(t *testing.T) {
	inLane(t, realNodeLane)
	node := realNode(t)
	dsNS, _, ok := state.RealNodePluginDaemonSet(node)
	if !ok {
		// The plugin's own MPS daemons are its children then, not pods.
		dsNS = ""
	}
	ns := namespace(t, "real-node-many")
	ctx := t.Context()
	// The node's pod capacity (the lab's kubelet runs 20) holds the pods already there, the
	// test's pods and, with the chart, a daemon pod per share: the kubelet would make room
	// for a daemon pod (node-critical) by evicting a test pod.
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	there, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	const shares = 2
	room := int(n.Status.Allocatable.Pods().Value()) - len(there.Items)
	migs := room - shares
	if dsNS != "" {
		migs -= shares
	}
	if migs < 8 {
		t.Fatalf("node %s has room for %d more pods (%d there); the test needs room for at least %d", node, room, len(there.Items), 8+2*shares)
	}
	t.Logf("node %s: %d pods there, room for %d: %d MIG slices and %d shares", node, len(there.Items), room, migs, shares)
	var claims []*resourcev1.ResourceClaim
	for i := range migs {
		claims = append(claims, claimOf(ns, "mig-"+strconv.Itoa(i), "mig.gpudra.dev", nil, `device.attributes["gpu.gpudra.dev"].migProfile.startsWith("1g.")`))
	}
	for i := range shares {
		claims = append(claims, claimOf(ns, "share-"+strconv.Itoa(i), "gpu-share.gpudra.dev", map[string]string{"memory": "4Gi", "compute": "20"}, ""))
	}
	uids := map[string]types.UID{}
	for i, c := range claims {
		created, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, c, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		claims[i], uids[c.Name] = created, created.UID
	}
	start := time.Now()
	if err := each(claims, func(c *resourcev1.ResourceClaim) error {
		_, err := client.CoreV1().Pods(ns).Create(ctx, lab.RealNodePod(ns, c.Name, node, []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(c.Name)}}), metav1.CreateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	devices := map[string]string{} // allocated device (and share) → claim
	for _, c := range claims {
		r := probeOutput(t, ns, c.Name)
		res, err := allocated(ctx, ns, c.Name)
		if err != nil || len(res) != 1 || res[0].Pool != node {
			t.Fatalf("claim %s: want one device of node %s, got %v (%v)", c.Name, node, res, err)
		}
		// A share device is allocated many times over, each time with a share of its own.
		got := res[0].Device
		if res[0].ShareID != nil {
			got += " share " + string(*res[0].ShareID)
		}
		if other, taken := devices[got]; taken {
			t.Errorf("claims %s and %s both got %s", other, c.Name, got)
		}
		devices[got] = c.Name
		if got := r.env["GPUDRA_DEVICES"]; got != res[0].Device || len(r.gpuNodes()) != 1 {
			t.Errorf("claim %s: the container has GPUDRA_DEVICES=%q and GPU device nodes %v, want %s and one GPU", c.Name, got, r.gpuNodes(), res[0].Device)
		}
	}
	t.Logf("%d pods created at once all run with their devices after %s", len(claims), time.Since(start).Round(100*time.Millisecond))
	// What the plugin keeps of prepared claims is where the checks below look for leftovers.
	held := checkpointClaims(t, node)
	for name, uid := range uids {
		if st := held[string(uid)]; st != string(prepared.PrepareCompleted) {
			t.Errorf("claim %s is prepared, but the checkpoint has it %q", name, st)
		}
		if specs := cdiSpecsMentioning(t, node, string(uid)); len(specs) == 0 {
			t.Errorf("claim %s is prepared but no CDI spec names it", name)
		}
	}
	for i := range shares {
		uid := uids["share-"+strconv.Itoa(i)]
		if _, err := os.Stat(mpsDir(node, uid)); err != nil {
			t.Errorf("share-%d runs under MPS limits, but its MPS directory: %v", i, err)
		}
	}

	start = time.Now()
	if err := client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	all := slices.Collect(maps.Values(uids))
	eventually(t, 5*time.Minute, "every claim is unprepared and nothing of them is left on the node", func(ctx context.Context) error {
		return leftOnNode(ctx, t, node, dsNS, ns, all)
	})
	t.Logf("%d pods deleted at once: all their claims unprepared after %s", len(claims), time.Since(start).Round(100*time.Millisecond))
}

// each runs f on every claim at once and joins the errors.
func each(claims []*resourcev1.ResourceClaim, f func(*resourcev1.ResourceClaim) error) error {
	var wg sync.WaitGroup
	errs := make([]error, len(claims))
	for i, c := range claims {
		wg.Go(func() { errs[i] = f(c) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// leftOnNode says what is left of the claims (in namespace ns) on the node: pods not gone,
// claims still reserved, CDI specs naming them, checkpoint entries, MPS directories, and
// MPS control daemons (in namespace dsNS; "" when the plugin runs its daemons itself).
func leftOnNode(ctx context.Context, t *testing.T, node, dsNS, ns string, uids []types.UID) error {
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	if len(pods.Items) > 0 {
		return fmt.Errorf("%d pods still there", len(pods.Items))
	}
	held := checkpointClaims(t, node)
	var left []string
	for _, uid := range uids {
		if specs := cdiSpecsMentioning(t, node, string(uid)); len(specs) > 0 {
			left = append(left, fmt.Sprintf("claim %s: CDI specs %v", uid, specs))
		}
		if st, ok := held[string(uid)]; ok {
			left = append(left, fmt.Sprintf("claim %s: in the checkpoint, %s", uid, st))
		}
		if _, err := os.Stat(mpsDir(node, uid)); !os.IsNotExist(err) {
			left = append(left, fmt.Sprintf("claim %s: MPS directory %s (%v)", uid, mpsDir(node, uid), err))
		}
		if dsNS != "" {
			if _, err := client.AppsV1().Deployments(dsNS).Get(ctx, mps.PodPrefix+string(uid), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				left = append(left, fmt.Sprintf("claim %s: MPS control daemon Deployment (%v)", uid, err))
			}
			if err := mpsPodsOf(ctx, dsNS, string(uid), 0); err != nil {
				left = append(left, fmt.Sprintf("claim %s: %v", uid, err))
			}
		}
	}
	claims, err := client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, c := range claims.Items {
		if len(c.Status.ReservedFor) > 0 {
			left = append(left, fmt.Sprintf("claim %s: reserved for %v", c.Name, c.Status.ReservedFor))
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("%d left: %s", len(left), strings.Join(left, "; "))
	}
	return nil
}

// mpsDir is a claim's MPS directory tree in the real node's plugin state.
func mpsDir(node string, uid types.UID) string {
	return filepath.Join(lab.Layout{Root: state.Dir}.NodeDir(node), "plugin", "mps", string(uid))
}

// checkpointClaims are the claims in the real node's plugin checkpoint, UID → state: those
// of checkpoint.json, changed by the records of its journal (checkpoint.journal) when the
// journal is the checkpoint's (same generation). A journal line is "<sha256> <json>"; a
// torn last line (no newline) is no record yet.
func checkpointClaims(t *testing.T, node string) map[string]string {
	t.Helper()
	dir := filepath.Join(lab.Layout{Root: state.Dir}.NodeDir(node), "plugin")
	type record struct {
		UID   string `json:"uid"`
		State string `json:"state"`
	}
	var cp struct {
		Data struct {
			Generation uint64             `json:"generation"`
			Claims     map[string]*record `json:"claims"`
		} `json:"data"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, checkpoint.File))
	if err != nil {
		t.Fatalf("the plugin's checkpoint: %v", err)
	}
	if err := json.Unmarshal(raw, &cp); err != nil {
		t.Fatalf("the plugin's checkpoint %s: %v", checkpoint.File, err)
	}
	claims := map[string]string{}
	for uid, r := range cp.Data.Claims {
		claims[uid] = r.State
	}
	journal, err := os.ReadFile(filepath.Join(dir, checkpoint.JournalFile))
	if os.IsNotExist(err) {
		return claims
	}
	if err != nil {
		t.Fatalf("the plugin's checkpoint journal: %v", err)
	}
	lines := strings.Split(string(journal), "\n")
	for i, l := range lines[:len(lines)-1] {
		_, payload, ok := strings.Cut(l, " ")
		if !ok {
			t.Fatalf("%s line %d: %q is not a checksummed record", checkpoint.JournalFile, i+1, l)
		}
		if i == 0 {
			var h struct {
				Generation uint64 `json:"generation"`
			}
			if err := json.Unmarshal([]byte(payload), &h); err != nil {
				t.Fatalf("%s header: %v", checkpoint.JournalFile, err)
			}
			if h.Generation != cp.Data.Generation {
				return claims // a journal of an older generation: the checkpoint holds it all
			}
			continue
		}
		var rec struct {
			Put    *record `json:"put"`
			Delete string  `json:"delete"`
		}
		if err := json.Unmarshal([]byte(payload), &rec); err != nil {
			t.Fatalf("%s line %d: %v", checkpoint.JournalFile, i+1, err)
		}
		switch {
		case rec.Put != nil:
			claims[rec.Put.UID] = rec.Put.State
		case rec.Delete != "":
			delete(claims, rec.Delete)
		}
	}
	return claims
}

// mpsPodsOf: the claim's MPS control daemon has want pods in ns.
func mpsPodsOf(ctx context.Context, ns, uid string, want int) error {
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: api.LabelMPSClaimUID + "=" + uid})
	if err != nil {
		return err
	}
	if len(pods.Items) != want {
		return fmt.Errorf("%d MPS control daemon pods of claim %s, want %d", len(pods.Items), uid, want)
	}
	return nil
}

// holdMessage is what the hold of holdPods refuses pods with.
const holdMessage = "held back by the e2e test"

// holdPods refuses the creation of pods labelled label=value in namespace ns (an admission
// policy), until release, which also has the ReplicaSet rs (if any) try again at once: the
// ReplicaSet controller backs off from failed creations.
func holdPods(t *testing.T, ns, label, value string) (release func(rs *appsv1.ReplicaSet)) {
	t.Helper()
	name := "e2e-hold-" + value
	objs := decode(t, `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: `+name+`}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  validations:
  - expression: "!has(object.metadata.labels) || !('`+label+`' in object.metadata.labels) || object.metadata.labels['`+label+`'] != '`+value+`'"
    message: "`+holdMessage+`"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: `+name+`}
spec:
  policyName: `+name+`
  validationActions: [Deny]
  matchResources:
    namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: `+ns+`}}
`)
	ap, err := lab.NewApplier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	released := false
	t.Cleanup(func() {
		if !released {
			_ = ap.Delete(context.Background(), objs...)
		}
	})
	if err := ap.Apply(t.Context(), objs...); err != nil {
		t.Fatal(err)
	}
	// A dry-run pod that any admission but the hold lets in (restricted pod security).
	probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-hold-", Namespace: ns, Labels: map[string]string{label: value}},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}}}}
	admitted := func(ctx context.Context) error {
		_, err := client.CoreV1().Pods(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	eventually(t, time.Minute, "the hold of pods "+label+"="+value+" is in force", func(ctx context.Context) error {
		err := admitted(ctx)
		if err != nil && strings.Contains(err.Error(), holdMessage) {
			return nil
		}
		if err == nil {
			return fmt.Errorf("a pod %s=%s is still admitted", label, value)
		}
		return err
	})
	return func(rs *appsv1.ReplicaSet) {
		t.Helper()
		released = true
		if err := ap.Delete(t.Context(), objs...); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, "the hold of pods "+label+"="+value+" is lifted", admitted)
		if rs == nil {
			return
		}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"e2e.gpudra.dev/hold-lifted":%q}}}`, time.Now().Format(time.RFC3339Nano))
		if _, err := client.AppsV1().ReplicaSets(rs.Namespace).Patch(t.Context(), rs.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// heldReplicaSet is the ReplicaSet of the claim's MPS control daemon, once it reports that
// it cannot create its pod because of the hold.
func heldReplicaSet(ctx context.Context, ns, uid string) (*appsv1.ReplicaSet, error) {
	list, err := client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: api.LabelMPSClaimUID + "=" + uid})
	if err != nil {
		return nil, err
	}
	if len(list.Items) != 1 {
		return nil, fmt.Errorf("%d ReplicaSets of the claim's MPS control daemon, want 1", len(list.Items))
	}
	rs := &list.Items[0]
	for _, c := range rs.Status.Conditions {
		if c.Type == appsv1.ReplicaSetReplicaFailure && c.Status == corev1.ConditionTrue && strings.Contains(c.Message, holdMessage) {
			return rs, nil
		}
	}
	return nil, fmt.Errorf("ReplicaSet %s does not report the hold yet (conditions %v)", rs.Name, rs.Status.Conditions)
}
