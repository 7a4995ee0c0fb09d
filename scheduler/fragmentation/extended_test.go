package fragmentation

import (
	"fmt"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/gpudra/gpudra/topology/placement"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// extendedPod is the pod of p asking for devices by extended resources (in requests and
// limits, as the API server keeps them).
func extendedPod(p *placement.Pod, resources corev1.ResourceList) *corev1.Pod {
	pod := podOf(p)
	r := &pod.Spec.Containers[0].Resources
	r.Limits = corev1.ResourceList{}
	for name, q := range resources {
		r.Requests[name], r.Limits[name] = q, q
	}
	return pod
}

// classChange gives a DeviceClass an extendedResourceName and a creation time.
type classChange struct {
	class, resource string
	created         time.Time
}

// changeClasses applies the changes in order through the API and waits until
// kube-scheduler's extended-resource cache has seen them all.
func (l *lab) changeClasses(changes []classChange) {
	for _, c := range changes {
		dc, err := l.client.ResourceV1().DeviceClasses().Get(l.ctx, c.class, metav1.GetOptions{})
		if err != nil {
			l.t.Fatal(err)
		}
		dc.CreationTimestamp = metav1.NewTime(c.created)
		dc.Spec.ExtendedResourceName = &c.resource
		if _, err := l.client.ResourceV1().DeviceClasses().Update(l.ctx, dc, metav1.UpdateOptions{}); err != nil {
			l.t.Fatal(err)
		}
	}
	// The cache handles events in order: once it knows a class created after the
	// changes, it has seen them.
	marker := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "changed.example.com"}}
	if _, err := l.client.ResourceV1().DeviceClasses().Create(l.ctx, marker, metav1.CreateOptions{}); err != nil {
		l.t.Fatal(err)
	}
	l.waitFor(func() bool {
		return l.dra.DeviceClassResolver().GetDeviceClass(corev1.ResourceName(resourceapi.ResourceDeviceClassPrefix+"changed.example.com")) != nil
	})
}

// scores runs PreScore and Score over all the lab's nodes; a PreScore that does not
// succeed (Skip) returns its status instead.
func (l *lab) scores(pl *Plugin, pod *corev1.Pod) (map[string]int64, *fwk.Status) {
	var nodes []fwk.NodeInfo
	for _, name := range l.names {
		nodes = append(nodes, l.infos[name])
	}
	cs := framework.NewCycleState()
	if st := pl.PreScore(l.ctx, cs, pod, nodes); !st.IsSuccess() {
		return nil, st
	}
	out := map[string]int64{}
	for _, ni := range nodes {
		s, st := pl.Score(l.ctx, cs, pod, ni)
		if !st.IsSuccess() {
			l.t.Fatalf("Score %s on %s: %v", pod.Name, ni.Node().Name, st)
		}
		out[ni.Node().Name] = s
	}
	return out, nil
}

// offer makes the node advertise extended resources in its allocatable, as a device
// plugin's node does.
func (l *lab) offer(node string, resources corev1.ResourceList) {
	n := l.infos[node].Node().DeepCopy()
	maps.Copy(n.Status.Allocatable, resources)
	l.infos[node].SetNode(n)
}

// TestExtendedResourcesScoreAsTheirClaim: a pod asking for devices by a DRA-backed
// extended resource is scored on every node exactly as the pod that asks for the same
// devices in a claim — kube-scheduler's claim for it — on nodes that do not offer the
// resource themselves, and as the pod without it where a device plugin offers it; pods
// the policies do not model are skipped both ways; an extended resource no class backs
// asks for no GPUs.
func TestExtendedResourcesScoreAsTheirClaim(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Hour)
	q := func(kv ...string) corev1.ResourceList {
		out := corev1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return out
	}
	devicesOf := func(class string, count int64) *resourceapi.ExactDeviceRequest {
		return &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}
	}
	for _, tc := range []struct {
		name      string
		classes   []classChange
		offer     corev1.ResourceList // node-d's allocatable from a device plugin
		resources corev1.ResourceList
		claim     *resourceapi.ExactDeviceRequest // the devices of the equivalent claim; nil: none
		skip      bool
	}{
		{name: "whole GPUs by the class's implicit name",
			resources: q(resourceapi.ResourceDeviceClassPrefix+api.DeviceClassGPU, "1"), claim: devicesOf(api.DeviceClassGPU, 1)},
		{name: "whole GPUs by the class's extendedResourceName",
			classes:   []classChange{{api.DeviceClassGPU, "gpudra.dev/gpu", t0}},
			resources: q("gpudra.dev/gpu", "3"), claim: devicesOf(api.DeviceClassGPU, 3)},
		{name: "a share by the class's implicit name",
			resources: q(resourceapi.ResourceDeviceClassPrefix+api.DeviceClassShare, "1"), claim: devicesOf(api.DeviceClassShare, 1)},
		{name: "two shares are skipped as two in a claim are",
			resources: q(resourceapi.ResourceDeviceClassPrefix+api.DeviceClassShare, "2"), claim: devicesOf(api.DeviceClassShare, 2), skip: true},
		{name: "an NVLink group of a sized class is skipped as its claim is",
			resources: q("gpudra.dev/nvlink-group-4", "1"), claim: devicesOf("nvlink-group-4.gpudra.dev", 1), skip: true},
		{name: "of two classes naming the resource the newer one answers",
			classes:   []classChange{{"mig.gpudra.dev", "gpudra.dev/gpu", t1}, {api.DeviceClassGPU, "gpudra.dev/gpu", t0}},
			resources: q("gpudra.dev/gpu", "1"), claim: devicesOf("mig.gpudra.dev", 1), skip: true},
		{name: "of two classes created together the lower name answers",
			classes:   []classChange{{api.DeviceClassShare, "gpudra.dev/gpu", t0}, {api.DeviceClassGPU, "gpudra.dev/gpu", t0}},
			resources: q("gpudra.dev/gpu", "1"), claim: devicesOf(api.DeviceClassShare, 1)},
		{name: "a node offering the resource through a device plugin sees no GPU demand there",
			classes: []classChange{{api.DeviceClassGPU, "gpudra.dev/gpu", t0}}, offer: q("gpudra.dev/gpu", "4"),
			resources: q("gpudra.dev/gpu", "2"), claim: devicesOf(api.DeviceClassGPU, 2)},
		{name: "an extended resource no class names is a plain resource",
			resources: q("example.com/fpga", "1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLab(t, replayNodes)
			pl := newPlugin(t, l, replayArgs)
			for i, busy := range []struct {
				pod  placement.Pod
				node string
			}{
				{placement.Pod{CPU: 4000, Memory: 8192, GPUs: 1, GPUMilli: 1000}, "node-a"},
				{placement.Pod{CPU: 2000, Memory: 4096, GPUs: 1, GPUMilli: 500}, "node-a"},
				{placement.Pod{CPU: 8000, Memory: 16384, GPUs: 2, GPUMilli: 1000}, "node-b"},
				{placement.Pod{CPU: 1000, Memory: 2048, GPUs: 1, GPUMilli: 300}, "node-c"},
			} {
				busy.pod.Name = fmt.Sprintf("busy-%d", i)
				pod := l.submit(&busy.pod, int64(100+i))
				claim, _ := l.dra.ResourceClaims().Get("default", busy.pod.Name)
				l.bind(pod, claim, busy.node)
			}
			l.changeClasses(tc.classes)
			if tc.offer != nil {
				l.offer("node-d", tc.offer)
			}

			shape := placement.Pod{CPU: 2000, Memory: 4096}
			shape.Name = "cpu-only"
			plain, st := l.scores(pl, podOf(&shape))
			if !st.IsSuccess() {
				t.Fatalf("PreScore of the pod without devices: %v", st)
			}
			want := plain
			if tc.claim != nil {
				shape.Name = "claimed"
				pod := podOf(&shape)
				claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "claimed", Namespace: "default", UID: "uid-claimed"}}
				claim.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "devices", Exactly: tc.claim}}
				l.claim(pod, claim)
				var st *fwk.Status
				want, st = l.scores(pl, pod)
				if tc.skip != (st.Code() == fwk.Skip) {
					t.Fatalf("PreScore of the pod with the claim: %v, want skip %v", st, tc.skip)
				}
				if !tc.skip && maps.Equal(want, plain) {
					t.Fatalf("the claim's scores %v equal those without devices: the case proves nothing", want)
				}
			}
			shape.Name = "extended"
			got, st := l.scores(pl, extendedPod(&shape, tc.resources))
			if tc.skip {
				if st.Code() != fwk.Skip {
					t.Fatalf("PreScore of the pod with extended resources %v: %v, want Skip as for its claim", tc.resources, st)
				}
				return
			}
			if !st.IsSuccess() {
				t.Fatalf("PreScore of the pod with extended resources %v: %v", tc.resources, st)
			}
			if tc.offer != nil {
				want = maps.Clone(want)
				want["node-d"] = plain["node-d"]
			}
			if !maps.Equal(got, want) {
				t.Fatalf("scores with extended resources %v: %v, want %v (without devices %v)", tc.resources, got, want, plain)
			}
			t.Logf("scores %v, without devices %v", got, plain)
		})
	}
}
