//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/driver/simulated"
	"github.com/gpudra/gpudra/lab"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// realAMDNode returns the lab's real node with a simulated AMD profile and that profile, or
// ends the test (labLacks) saying why there is none.
func realAMDNode(t *testing.T) (node, kfd string) {
	t.Helper()
	if _, err := state.RealNodeAvailable(); err != nil {
		labLacks(t, "no real node: %v", err)
	}
	for _, n := range state.RealNodes() {
		if n.KFD != "" {
			return n.Name, n.KFD
		}
	}
	labLacks(t, "a real node with kfd (a simulated AMD profile such as mixed-l40s-mi210)")
	return "", ""
}

// TestRealNodeContainerReceivesAMDDevices: a whole AMD GPU of a simulated KFD tree reaches a
// real container as its CDI spec says: /dev/kfd, the GPU's render node (and no other GPU's,
// NVIDIA's included) and ROCR_VISIBLE_DEVICES naming it; deleting the pod unprepares the
// claim and removes its spec.
func TestRealNodeContainerReceivesAMDDevices(t *testing.T) {
	inLane(t, realNodeLane)
	node, kfd := realAMDNode(t)
	ns := namespace(t, "real-node-amd")
	ctx := t.Context()
	c := claimOf(ns, "amd", api.DeviceClassAMDGPU, nil, "")
	if _, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, c, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := lab.RealNodePod(ns, c.Name, node, []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(c.Name)}})
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := probeOutputOn(t, node, ns, c.Name)
	res, err := allocated(ctx, ns, c.Name)
	if err != nil || len(res) != 1 || res[0].Pool != node {
		t.Fatalf("claim %s: want one device of node %s, got %v (%v)", c.Name, node, res, err)
	}
	dev := publishedDevices(ctx, t)[node+"/"+res[0].Device]
	t.Logf("claim %s got %s; the container reports:\n%s", c.Name, res[0].Device, r.raw)
	if v := stringAttr(dev, api.AttrVendor); v != api.VendorAMD {
		t.Fatalf("claim %s got %s of vendor %q, want an AMD GPU", c.Name, res[0].Device, v)
	}

	// The GPU's render node in the simulated tree the node's plugin reads (the same tree for
	// the same profile and node name).
	inv, err := simulated.KFDInventory(kfd, node)
	if err != nil {
		t.Fatal(err)
	}
	index, _ := strconv.Atoi(stringAttr(dev, api.AttrIndex))
	g := inv.GPU(index)
	if g == nil || g.KFD == nil {
		t.Fatalf("GPU %d is not an AMD GPU of profile %s", index, kfd)
	}
	render := fmt.Sprintf("/dev/dri/renderD%d", g.KFD.RenderMinor)

	if !regexp.MustCompile(`^char [0-9]+:0$`).MatchString(r.devices["/dev/kfd"]) {
		t.Errorf("the container's /dev/kfd is %q, want a character device", r.devices["/dev/kfd"])
	}
	if want := fmt.Sprintf("char 226:%d", g.KFD.RenderMinor); r.devices[render] != want {
		t.Errorf("the container's %s is %q, want %s", render, r.devices[render], want)
	}
	for path := range r.devices {
		if regexp.MustCompile(`^/dev/dri/renderD[0-9]+$`).MatchString(path) && path != render {
			t.Errorf("the container has %s besides its GPU's %s", path, render)
		}
	}
	if got := r.gpuNodes(); len(got) > 0 {
		t.Errorf("the container of an AMD GPU has NVIDIA's GPU device nodes %v", got)
	}
	if got, want := r.env["ROCR_VISIBLE_DEVICES"], stringAttr(dev, api.AttrUUID); want == "" || got != want {
		t.Errorf("ROCR_VISIBLE_DEVICES=%q in the container, the GPU's uuid is %q", got, want)
	}

	got, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, c.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uid := string(got.UID)
	if specs := cdiSpecsMentioning(t, node, uid); len(specs) == 0 {
		t.Errorf("claim %s is prepared but no CDI spec of node %s names it", c.Name, node)
	}
	if err := client.CoreV1().Pods(ns).Delete(ctx, c.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "claim amd is unprepared: pod gone, CDI spec removed", func(ctx context.Context) error {
		if _, err := client.CoreV1().Pods(ns).Get(ctx, c.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod %s still there (%v)", c.Name, err)
		}
		if specs := cdiSpecsMentioning(t, node, uid); len(specs) > 0 {
			return fmt.Errorf("CDI specs still name the claim: %v", specs)
		}
		return nil
	})
}
