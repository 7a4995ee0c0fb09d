//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpudra/gpudra/lab"
)

// TestDemoClaimsAreAllocatedAsDocumented applies deployments/examples (what `make demo` shows)
// and checks each claim got what its comment promises.
func TestDemoClaimsAreAllocatedAsDocumented(t *testing.T) {
	inLane(t, clusterLane)
	objs, err := lab.ReadManifests(filepath.Join(repo, "deployments", "examples"))
	if err != nil {
		t.Fatal(err)
	}
	ap, err := lab.NewApplier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteNamespace(t, lab.DemoNamespace) })
	if err := ap.Apply(t.Context(), objs...); err != nil {
		t.Fatal(err)
	}
	ns := lab.DemoNamespace
	for _, pod := range []string{"whole-gpu", "tensor-parallel", "nvlink-pair", "mig-notebook", "inference", "fixed-tenant", "guaranteed-tenant", "best-effort-tenant"} {
		eventually(t, 2*time.Minute, "example pod "+pod+" runs", podRunning(ns, pod))
	}
	var workers []corev1.Pod
	eventually(t, 2*time.Minute, "both training Job workers run", func(ctx context.Context) error {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=training"})
		if err != nil {
			return err
		}
		workers = nil
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				workers = append(workers, p)
			}
		}
		if len(workers) != 2 {
			return fmt.Errorf("%d of 2 workers run", len(workers))
		}
		return nil
	})

	devices := publishedDevices(t.Context(), t)
	type result struct {
		node   string
		device resourcev1.Device
		alloc  resourcev1.DeviceRequestAllocationResult
	}
	results := func(claim string) []result {
		t.Helper()
		rs, err := allocated(t.Context(), ns, claim)
		if err != nil {
			t.Fatal(err)
		}
		var out []result
		for _, r := range rs {
			d, ok := devices[r.Pool+"/"+r.Device]
			if !ok {
				t.Fatalf("claim %s got %s/%s, which no node publishes", claim, r.Pool, r.Device)
			}
			out = append(out, result{node: r.Pool, device: d, alloc: r})
		}
		return out
	}
	one := func(claim string) result {
		t.Helper()
		rs := results(claim)
		if len(rs) != 1 {
			t.Fatalf("claim %s got %d devices, want 1", claim, len(rs))
		}
		return rs[0]
	}

	t.Run("whole GPU by CEL is an H100", func(t *testing.T) {
		r := one("one-h100")
		if lab.DeviceType(r.device) != "gpu" || !strings.Contains(stringAttr(r.device, "productName"), "H100") || !strings.Contains(nodeProfile(r.node), "h100") {
			t.Errorf("got %s/%s type %s productName %q on a %s node", r.node, r.alloc.Device, lab.DeviceType(r.device), stringAttr(r.device, "productName"), nodeProfile(r.node))
		}
	})
	t.Run("NVLink clique is 4 GPUs of one clique on one node", func(t *testing.T) {
		rs := results("nvlink-quad")
		if len(rs) != 4 {
			t.Fatalf("got %d devices, want 4", len(rs))
		}
		clique := stringAttr(rs[0].device, "nvlinkClique")
		for _, r := range rs {
			if r.node != rs[0].node || lab.DeviceType(r.device) != "gpu" || clique == "" || stringAttr(r.device, "nvlinkClique") != clique {
				t.Errorf("got %s", join(rs, func(r result) string {
					return fmt.Sprintf("%s/%s (type %s, clique %q)", r.node, r.alloc.Device, lab.DeviceType(r.device), stringAttr(r.device, "nvlinkClique"))
				}))
				break
			}
		}
		if nodeProfile(rs[0].node) == "l40s-pcie" {
			t.Errorf("an NVLink clique on PCIe-only node %s", rs[0].node)
		}
	})
	t.Run("NVLink group is one group device of 2 GPUs", func(t *testing.T) {
		r := one("nvlink-pair")
		if lab.DeviceType(r.device) != "nvlink-group" || stringAttr(r.device, "gpuCount") != "2" {
			t.Errorf("got %s/%s type %s gpuCount %s", r.node, r.alloc.Device, lab.DeviceType(r.device), stringAttr(r.device, "gpuCount"))
		}
	})
	t.Run("MIG slice is a 1g.10gb partition of an H100", func(t *testing.T) {
		r := one("mig-1g")
		if lab.DeviceType(r.device) != "mig" || stringAttr(r.device, "migProfile") != "1g.10gb" || !strings.Contains(nodeProfile(r.node), "h100") {
			t.Errorf("got %s/%s type %s migProfile %q on a %s node", r.node, r.alloc.Device, lab.DeviceType(r.device), stringAttr(r.device, "migProfile"), nodeProfile(r.node))
		}
	})
	t.Run("fractional share consumes 10Gi and 25 percent", func(t *testing.T) {
		r := one("quarter-gpu")
		if lab.DeviceType(r.device) != "share" {
			t.Errorf("got %s/%s of type %s, want a share", r.node, r.alloc.Device, lab.DeviceType(r.device))
		}
		for name, want := range map[resourcev1.QualifiedName]string{"memory": "10Gi", "compute": "25"} {
			got, ok := r.alloc.ConsumedCapacity[name]
			if !ok || got.Cmp(resource.MustParse(want)) != 0 {
				t.Errorf("consumed %s = %v (present %v), want %s", name, got.String(), ok, want)
			}
		}
	})
	t.Run("share tiers consume compute 20, 30 and 0", func(t *testing.T) {
		for claim, want := range map[string]string{"fixed-share": "20", "guaranteed-share": "30", "best-effort-share": "0"} {
			r := one(claim)
			if lab.DeviceType(r.device) != "share" {
				t.Errorf("claim %s got %s/%s of type %s, want a share", claim, r.node, r.alloc.Device, lab.DeviceType(r.device))
			}
			got, ok := r.alloc.ConsumedCapacity["compute"]
			if !ok || got.Cmp(resource.MustParse(want)) != 0 {
				t.Errorf("claim %s consumes compute %s (present %v), want %s", claim, got.String(), ok, want)
			}
		}
	})
	t.Run("each Job worker has a GPU of its own from the template", func(t *testing.T) {
		seen := map[string]string{}
		for _, p := range workers {
			if len(p.Status.ResourceClaimStatuses) != 1 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
				t.Fatalf("worker %s has claim statuses %+v, want one generated claim", p.Name, p.Status.ResourceClaimStatuses)
			}
			r := one(*p.Status.ResourceClaimStatuses[0].ResourceClaimName)
			key := r.node + "/" + r.alloc.Device
			if lab.DeviceType(r.device) != "gpu" || seen[key] != "" {
				t.Errorf("worker %s got %s (type %s; also held by %q)", p.Name, key, lab.DeviceType(r.device), seen[key])
			}
			seen[key] = p.Name
		}
	})
}
