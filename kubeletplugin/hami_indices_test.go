package kubeletplugin_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	plugin "github.com/gpudra/gpudra/kubeletplugin"
)

// hamiShareOn is a claim for a share of GPU gpu enforced by HAMi-core.
func hamiShareOn(gpu int, memory, compute string) string {
	return fmt.Sprintf(`
devices:
  requests:
  - name: share
    exactly:
      deviceClassName: gpu-share.gpudra.dev
      selectors:
      - cel:
          expression: device.attributes["gpu.gpudra.dev"].index == %d
      capacity:
        requests:
          memory: %s
          compute: %q
`, gpu, memory, compute) + withConfig("share", "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nlimits: {enforcement: HAMi}")
}

// hamiCluster is an API server with the claims of a HAMi-core node and the pods that use
// them, counting its reads.
type hamiCluster struct {
	n      *node
	client *fake.Clientset
	claims map[string]*resourceapi.ResourceClaim
	reads  atomic.Int64
	fail   atomic.Bool
}

func newHAMiCluster(t *testing.T, specs map[string]string) *hamiCluster {
	t.Helper()
	h := &hamiCluster{client: fake.NewClientset(), claims: map[string]*resourceapi.ResourceClaim{}}
	h.client.PrependReactor("get", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		h.reads.Add(1)
		if h.fail.Load() {
			return true, nil, errors.New("the API server is unreachable")
		}
		return false, nil, nil
	})
	h.n = newNode(t, "dgx-h100", func(c *plugin.Config) { c.VGPULibrary, c.Client = "/opt/hami/libvgpu.so", h.client })
	for _, key := range slices.Sorted(maps.Keys(specs)) {
		h.claims[key] = h.n.allocate(specs[key])
	}
	return h
}

// addPod adds a pod whose containers use the claims named by their keys (a key
// "key/request" takes one request of the claim); claim "b" comes from a template, the
// others by name. Each claim is reserved for the pods that use it.
func (h *hamiCluster) addPod(t *testing.T, name string, containers [][]string) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("pod-" + name)}}
	used := map[string]bool{}
	for k, keys := range containers {
		ctr := corev1.Container{Name: fmt.Sprintf("c%d", k)}
		for _, key := range keys {
			key, request, _ := strings.Cut(key, "/")
			ctr.Resources.Claims = append(ctr.Resources.Claims, corev1.ResourceClaim{Name: key, Request: request})
			if used[key] {
				continue
			}
			used[key] = true
			c := h.claims[key]
			if key == "b" {
				pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: key, ResourceClaimTemplateName: ptr.To("template-b")})
				pod.Status.ResourceClaimStatuses = append(pod.Status.ResourceClaimStatuses, corev1.PodResourceClaimStatus{Name: key, ResourceClaimName: ptr.To(c.Name)})
			} else {
				pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: key, ResourceClaimName: ptr.To(c.Name)})
			}
			reservedFor(c, pod)
		}
		pod.Spec.Containers = append(pod.Spec.Containers, ctr)
	}
	if err := h.client.Tracker().Add(pod); err != nil {
		t.Fatal(err)
	}
	for _, c := range h.claims {
		if err := h.client.Tracker().Delete(resourceapi.SchemeGroupVersion.WithResource("resourceclaims"), c.Namespace, c.Name); err != nil && !strings.Contains(err.Error(), "not found") {
			t.Fatal(err)
		}
		if err := h.client.Tracker().Add(c); err != nil {
			t.Fatal(err)
		}
	}
}

// prepareBatch prepares the claims of keys in one call, as the kubelet prepares a pod's
// claims, and returns each claim's error.
func (h *hamiCluster) prepareBatch(t *testing.T, d *plugin.Driver, keys ...string) map[string]error {
	t.Helper()
	var batch []*resourceapi.ResourceClaim
	for _, k := range keys {
		batch = append(batch, h.claims[k])
	}
	out, err := d.PrepareResourceClaims(context.Background(), batch)
	if err != nil {
		t.Fatal(err)
	}
	errs := map[string]error{}
	for _, k := range keys {
		errs[k] = out[h.claims[k].UID].Err
	}
	return errs
}

// hamiCaps are the HAMi-core caps the claim's CDI spec sets.
func (h *hamiCluster) hamiCaps(t *testing.T, key string) map[string]string {
	t.Helper()
	out := map[string]string{}
	s := h.n.spec(h.claims[key])
	if s == nil {
		t.Fatalf("claim %s has no CDI spec", key)
	}
	for _, d := range s.Devices {
		for k, v := range env(d.ContainerEdits) {
			if strings.HasPrefix(k, "CUDA_DEVICE_MEMORY_LIMIT") || strings.HasPrefix(k, "CUDA_DEVICE_SM_LIMIT") {
				out[k] = v
			}
		}
	}
	return out
}

// A container that gets GPUs from several claims sees them numbered by CUDA in PCI bus
// order across all of them: each claim's HAMi-core caps are under those indices, or the
// claim is refused when no numbering is right for all its containers.
func TestHAMiCapsFollowTheContainersCUDANumbering(t *testing.T) {
	shareOn5, shareOn2 := hamiShareOn(5, "4Gi", "30"), hamiShareOn(2, "2Gi", "20")
	capsOn5At := func(i int) map[string]string {
		return map[string]string{fmt.Sprintf("CUDA_DEVICE_MEMORY_LIMIT_%d", i): "4096m", fmt.Sprintf("CUDA_DEVICE_SM_LIMIT_%d", i): "30"}
	}
	capsOn2At := func(i int) map[string]string {
		return map[string]string{fmt.Sprintf("CUDA_DEVICE_MEMORY_LIMIT_%d", i): "2048m", fmt.Sprintf("CUDA_DEVICE_SM_LIMIT_%d", i): "20"}
	}
	tests := []struct {
		name       string
		claims     map[string]string
		containers [][]string
		batch      []string
		want       map[string]map[string]string // claim → its spec's caps
		wantErr    map[string]string            // claim → what its prepare error says
	}{
		{name: "shares of two claims in one container get disjoint indices, the higher GPU first",
			claims: map[string]string{"a": shareOn5, "b": shareOn2}, containers: [][]string{{"a", "b"}}, batch: []string{"a", "b"},
			want: map[string]map[string]string{"a": capsOn5At(1), "b": capsOn2At(0)}},
		{name: "shares of two claims in one container get disjoint indices, the lower GPU first",
			claims: map[string]string{"a": shareOn5, "b": shareOn2}, containers: [][]string{{"a", "b"}}, batch: []string{"b", "a"},
			want: map[string]map[string]string{"a": capsOn5At(1), "b": capsOn2At(0)}},
		{name: "a whole GPU of another claim on a lower bus id moves the share",
			claims: map[string]string{"a": shareOn5, "w": gpuClaim("2", "")}, containers: [][]string{{"w", "a"}}, batch: []string{"a", "w"},
			want: map[string]map[string]string{"a": capsOn5At(1), "w": {}}},
		{name: "a whole GPU of another claim on a higher bus id leaves the share at 0",
			claims: map[string]string{"b": shareOn2, "w": gpuClaim("5", "")}, containers: [][]string{{"b", "w"}}, batch: []string{"w", "b"},
			want: map[string]map[string]string{"b": capsOn2At(0)}},
		{name: "two containers given the same claims agree",
			claims: map[string]string{"a": shareOn5, "b": shareOn2}, containers: [][]string{{"a", "b"}, {"b", "a"}}, batch: []string{"a", "b"},
			want: map[string]map[string]string{"a": capsOn5At(1), "b": capsOn2At(0)}},
		{name: "containers that each get one claim keep each claim's own numbering",
			claims: map[string]string{"a": shareOn5, "b": shareOn2}, containers: [][]string{{"a"}, {"b"}}, batch: []string{"a", "b"},
			want: map[string]map[string]string{"a": capsOn5At(0), "b": capsOn2At(0)}},
		{name: "shares of one GPU from two claims in one container are refused",
			claims: map[string]string{"a": hamiShareOn(3, "2Gi", "20"), "b": hamiShareOn(3, "3Gi", "30")}, containers: [][]string{{"a", "b"}}, batch: []string{"a", "b"},
			wantErr: map[string]string{"a": "put both shares in one claim", "b": "put both shares in one claim"}},
		{name: "a claim whose containers see its GPU at different indices is refused",
			claims: map[string]string{"a": shareOn5, "w": gpuClaim("2", "")}, containers: [][]string{{"a", "w"}, {"a"}}, batch: []string{"a", "w"},
			wantErr: map[string]string{"a": "different CUDA indices (1 in p/c0, 0 in p/c1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHAMiCluster(t, tc.claims)
			h.addPod(t, "p", tc.containers)
			errs := h.prepareBatch(t, h.n.newDriver(nil), tc.batch...)
			for key, want := range tc.wantErr {
				if err := errs[key]; err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("claim %s: prepare error %v, want one that says %q", key, err, want)
				}
			}
			for key, want := range tc.want {
				if err := errs[key]; err != nil {
					t.Fatalf("claim %s: %v", key, err)
				}
				if got := h.hamiCaps(t, key); !maps.Equal(got, want) {
					t.Errorf("claim %s's spec caps %v, want %v", key, got, want)
				}
			}
		})
	}
}

// A claim prepared for one pod has its caps written; a later pod whose container gets it
// beside another claim that moves its GPU is refused rather than capped wrong.
func TestHAMiCapsOfAPreparedClaimRefuseANeighbourThatMovesThem(t *testing.T) {
	h := newHAMiCluster(t, map[string]string{"a": hamiShareOn(5, "4Gi", "30"), "w": gpuClaim("2", "")})
	h.addPod(t, "first", [][]string{{"a"}})
	d := h.n.newDriver(nil)
	if err := h.prepareBatch(t, d, "a")["a"]; err != nil {
		t.Fatal(err)
	}
	h.addPod(t, "second", [][]string{{"a", "w"}})
	err := h.prepareBatch(t, d, "w")["w"]
	if err == nil || !strings.Contains(err.Error(), "prepared on this node before") || !strings.Contains(err.Error(), "second/c0") {
		t.Fatalf("prepare error %v, want one naming the container second/c0 and the prepared claim", err)
	}
}

// The indices are decided once, at prepare, and recorded: a plugin that restarts and
// writes the spec again from its checkpoint writes the same caps without reading anything.
func TestHAMiCapsSurviveARestart(t *testing.T) {
	h := newHAMiCluster(t, map[string]string{"a": hamiShareOn(5, "4Gi", "30"), "w": gpuClaim("2", "")})
	h.addPod(t, "p", [][]string{{"a", "w"}})
	for key, err := range h.prepareBatch(t, h.n.newDriver(nil), "a", "w") {
		if err != nil {
			t.Fatalf("claim %s: %v", key, err)
		}
	}
	want := h.hamiCaps(t, "a")
	if err := os.Remove(h.n.specPath(h.claims["a"].UID)); err != nil {
		t.Fatal(err)
	}
	h.fail.Store(true)
	if err := h.prepareBatch(t, h.n.newDriver(nil), "a", "w")["a"]; err != nil {
		t.Fatal(err)
	}
	if got := h.hamiCaps(t, "a"); !maps.Equal(got, want) || got["CUDA_DEVICE_MEMORY_LIMIT_1"] != "4096m" {
		t.Errorf("caps after a restart %v, want %v", got, want)
	}
}

// A claim alone on the node reads nothing and is numbered on its own; a read that fails
// fails the prepare, which the kubelet retries, rather than guess.
func TestHAMiCapsReadOnlyWhenAnotherClaimMayShareTheContainer(t *testing.T) {
	h := newHAMiCluster(t, map[string]string{"a": hamiShareOn(5, "4Gi", "30"), "w": gpuClaim("2", ""), "v": gpuClaim("3", ""), "s": hamiShareOn(6, "1Gi", "10")})
	h.addPod(t, "p", [][]string{{"a", "w"}})
	h.addPod(t, "q", [][]string{{"v"}})
	h.addPod(t, "r", [][]string{{"s"}})
	d := h.n.newDriver(nil)
	for _, key := range []string{"v", "s"} {
		if err := h.prepareBatch(t, d, key)[key]; err != nil {
			t.Fatal(err)
		}
		if key == "s" {
			if got, want := h.hamiCaps(t, "s"), map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_0": "1024m", "CUDA_DEVICE_SM_LIMIT_0": "10"}; !maps.Equal(got, want) {
				t.Errorf("caps of a share alone %v, want %v", got, want)
			}
		}
		if err := unprepare(t, d, h.claims[key]); err != nil {
			t.Fatal(err)
		}
	}
	if n := h.reads.Load(); n != 0 {
		t.Errorf("a whole GPU and a HAMi-core share, each alone on the node, read %d objects, want none", n)
	}
	h.fail.Store(true)
	errs := h.prepareBatch(t, d, "a", "w")
	if err := errs["a"]; err == nil || !strings.Contains(err.Error(), "reading pod default/p") {
		t.Errorf("prepare error %v, want one naming the pod it could not read", err)
	}
}
