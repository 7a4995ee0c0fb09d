package kubeletplugin_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// A UID that is not one Kubernetes gives ("", ".", a path) is refused before it names
// any file: the error names the claim and the accepted form, and no other claim's
// directories or spec go.
func TestClaimUIDThatIsNotAKubernetesUIDIsRefused(t *testing.T) {
	n := newNode(t, "dgx-h100")
	d := n.newDriver(nil)
	other := n.allocate(gpuClaim("2", mpsConfig))
	mustPrepare(t, d, other)
	pipe, _ := mpsMounts(t, n, other)
	whole := n.allocate(gpuClaim("5", ""))

	for _, uid := range []types.UID{"", ".", "..", "../uid-1", "a/b", "UID-WITH-CAPITALS"} {
		obj := kubeletplugin.NamespacedObject{UID: uid, NamespacedName: types.NamespacedName{Namespace: "default", Name: "evil"}}
		out, err := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{obj})
		if err != nil {
			t.Fatal(err)
		}
		if err := out[uid]; err == nil || !strings.Contains(err.Error(), "default/evil") || !strings.Contains(err.Error(), "DNS-1123 label") {
			t.Errorf("unprepare of UID %q: %v, want an error naming the claim and the accepted form", uid, err)
		}
		c := whole.DeepCopy()
		c.UID = uid
		if _, err := prepare(t, d, c); err == nil || !strings.Contains(err.Error(), "UUID") {
			t.Errorf("prepare of UID %q: %v, want an error naming the accepted form", uid, err)
		}
	}
	if _, err := os.Stat(pipe); err != nil {
		t.Errorf("the prepared claim's MPS pipe directory went: %v", err)
	}
	if n.spec(other) == nil || len(n.mps.daemons()) != 1 {
		t.Error("the prepared claim lost its CDI spec or daemon")
	}
	if err := unprepare(t, d, other); err != nil {
		t.Fatal(err)
	}
	assertClean(t, n, other)
}
