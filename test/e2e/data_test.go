//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/lab"
	"github.com/gpudra/gpudra/locality"
	"github.com/gpudra/gpudra/queueing/prewarm"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// labelForTest sets a label on the nodes and removes it when the test ends.
func labelForTest(t *testing.T, key, value string, nodes ...string) {
	t.Helper()
	for _, n := range nodes {
		if err := labelNode(t.Context(), n, key, value); err != nil {
			t.Fatalf("label node %s: %v", n, err)
		}
		t.Cleanup(func() {
			if err := labelNode(context.Background(), n, key, ""); err != nil {
				t.Errorf("unlabel node %s: %v", n, err)
			}
		})
	}
}

// TestDatasetGangLandsInTheCachingRack: a gang of 4 one-GPU pods that must share a rack and
// names a dataset cached (plain gpudra label) on rack-t2's nodes is planned there, although
// rack-t1 comes first by name and fits it as well, and the check's message says where the
// dataset is cached.
func TestDatasetGangLandsInTheCachingRack(t *testing.T) {
	inLane(t, clusterLane)
	requireTrainingBlock(t)
	ns := layoutQueues(t, "e2e-data-gang", false)
	key := locality.LabelKey(locality.Dataset{Namespace: ns, Name: "imagenet"})
	labelForTest(t, key, "cached", "t2-n1", "t2-n2", "t2-n3", "t2-n4")

	apply(t, slicedJob("data-gang", ns, "gpudra", 4, "gpudra.dev/required-topology: rack, "+api.AnnotationDatasets+": imagenet"))
	nodes := nodesByIndex(t, ns, "data-gang", 4)
	for pod, node := range nodes {
		if r := nodeRack(node); r != "rack-t2" {
			t.Errorf("pod %d on %s in %s, want rack-t2 (where imagenet is cached)", pod, node, r)
		}
	}
	_, msg, err := checkMessage(t.Context(), ns, "data-gang")
	if err != nil {
		t.Fatal(err)
	}
	if want := "dataset " + ns + "/imagenet cached on 4 of 4 nodes of block-t/rack-t2"; !strings.Contains(msg, want) {
		t.Errorf("check message %q does not say %q", msg, want)
	}
	removeJob(t, ns, "data-gang")
}

// dataPod is a pod of one GPU (claim template one-gpu) naming imagenet, limited to the nodes
// carrying pool=value, scheduled by the lab's scheduler; volume names a claim it mounts.
func dataPod(ns, name, pool, annotation, claim string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{"e2e.gpudra.dev/data-pool": pool},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			ResourceClaims:                []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("one-gpu")}},
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
				Claims:   []corev1.ResourceClaim{{Name: "gpu"}},
			}}},
		},
	}
	if annotation != "" {
		p.Annotations = map[string]string{api.AnnotationDatasets: annotation}
	}
	if claim != "" {
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	}
	return p
}

// podNode waits for the pod to run and returns its node.
func podNode(t *testing.T, ns, name string) string {
	t.Helper()
	eventually(t, 2*time.Minute, "pod "+name+" runs", podRunning(ns, name))
	p, err := client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Spec.NodeName
}

// requireDataLocalityScheduler ends a test (labLacks) when the lab's scheduler is not
// gpudra-scheduler (whose default profile scores with DataLocality) or has no training block.
func requireDataLocalityScheduler(t *testing.T) {
	t.Helper()
	if state.Scheduler != lab.GpudraScheduler {
		labLacks(t, "%s: the lab runs %s (lab file scheduler:)", lab.GpudraScheduler, state.Scheduler)
	}
	if nodesWithProfile("hgx-a100-4gpu") < 8 {
		labLacks(t, "the training block of deployments/lab/e2e.yaml (8 hgx-a100-4gpu nodes)")
	}
}

// TestDatasetPodLandsOnACachingNode: a pod naming a dataset, free to run on two alike empty
// nodes, runs on the one caching it (DataLocality), whichever of the two that is.
func TestDatasetPodLandsOnACachingNode(t *testing.T) {
	inLane(t, clusterLane)
	requireDataLocalityScheduler(t)
	ns := namespace(t, "e2e-data-pod")
	apply(t, oneGPUTemplate(ns))
	labelForTest(t, "e2e.gpudra.dev/data-pool", "pod", "t1-n3", "t1-n4")
	for _, caching := range []string{"t1-n4", "t1-n3"} {
		key := locality.LabelKey(locality.Dataset{Namespace: ns, Name: "imagenet"})
		if err := labelNode(t.Context(), caching, key, "cached"); err != nil {
			t.Fatal(err)
		}
		name := "reader-" + caching
		if _, err := client.CoreV1().Pods(ns).Create(t.Context(), dataPod(ns, name, "pod", "imagenet", ""), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if node := podNode(t, ns, name); node != caching {
			t.Errorf("pod %s on %s, want %s (the node caching imagenet)", name, node, caching)
		}
		deletePodNow(t, ns, name)
		if err := labelNode(context.Background(), caching, key, ""); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDatasetFluidVolumeLandsOnACachingNode: the Fluid way, without Fluid running. A
// PersistentVolume as Fluid makes one (storage class fluid, CSI driver fuse.csi.fluid.io,
// the cache label fluid.io/s-<namespace>-<dataset>), its bound claim named after the
// dataset, and a pod mounting it: the pod runs on the node carrying that label.
func TestDatasetFluidVolumeLandsOnACachingNode(t *testing.T) {
	inLane(t, clusterLane)
	requireDataLocalityScheduler(t)
	ns := namespace(t, "e2e-data-fluid")
	apply(t, oneGPUTemplate(ns))
	labelForTest(t, "e2e.gpudra.dev/data-pool", "fluid", "t1-n3", "t1-n4")
	cacheKey, ok := locality.FluidKey(locality.Dataset{Namespace: ns, Name: "imagenet"})
	if !ok {
		t.Fatalf("Fluid's label for %s/imagenet is too long", ns)
	}
	labelForTest(t, cacheKey, "true", "t1-n4")

	pvName := ns + "-imagenet"
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName, Labels: map[string]string{cacheKey: "true"}},
		Spec: corev1.PersistentVolumeSpec{
			StorageClassName:              locality.FluidStorageClass,
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany},
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("100Pi")},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &corev1.ObjectReference{Namespace: ns, Name: "imagenet"},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: locality.FluidCSIDriver, VolumeHandle: pvName}},
		},
	}
	if _, err := client.CoreV1().PersistentVolumes().Create(t.Context(), pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := client.CoreV1().PersistentVolumes().Delete(context.Background(), pvName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete PersistentVolume %s: %v", pvName, err)
		}
	})
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "imagenet"},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(locality.FluidStorageClass),
			VolumeName:       pvName,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("100Pi")}},
		},
	}
	if _, err := client.CoreV1().PersistentVolumeClaims(ns).Create(t.Context(), pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "claim imagenet is bound", func(ctx context.Context) error {
		c, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "imagenet", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c.Status.Phase != corev1.ClaimBound {
			return fmt.Errorf("claim imagenet is %s", c.Status.Phase)
		}
		return nil
	})
	if _, err := client.CoreV1().Pods(ns).Create(t.Context(), dataPod(ns, "reader", "fluid", "", "imagenet"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if node := podNode(t, ns, "reader"); node != "t1-n4" {
		t.Errorf("pod reader on %s, want t1-n4 (labelled %s)", node, cacheKey)
	}
}

// TestDatasetPrewarmWhileQueued: with Fluid's DataLoad kind served, a Workload that waits for
// quota and names a dataset gets a DataLoad owned by it, which is deleted once the Workload
// is admitted.
func TestDatasetPrewarmWhileQueued(t *testing.T) {
	inLane(t, clusterLane)
	if !state.Kueue {
		labLacks(t, "Kueue (lab file kueue.enabled: false)")
	}
	if _, err := client.Discovery().ServerResourcesForGroupVersion(prewarm.DataLoadResource.GroupVersion().String()); err != nil {
		labLacks(t, "Fluid's DataLoad CRD (%s): %v", prewarm.DataLoadResource.GroupResource(), err)
	}
	requireTrainingBlock(t)
	const cq = "e2e-data-prewarm"
	applyForTest(t, decode(t, clusterQueue(cq, true, 16, 1))...)
	ns := namespace(t, "e2e-data-prewarm")
	apply(t, `
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: gpudra, namespace: `+ns+`}
spec: {clusterQueue: `+cq+`}
`+oneGPUTemplate(ns))

	apply(t, slicedJob("holder", ns, "gpudra", 1, "gpudra.dev/required-topology: rack"))
	eventually(t, 2*time.Minute, "holder runs", jobRuns(ns, "holder", 1))
	apply(t, slicedJob("reader", ns, "gpudra", 1, "gpudra.dev/required-topology: rack, "+api.AnnotationDatasets+": imagenet"))

	var uid string
	eventually(t, 2*time.Minute, "the queued reader's Workload has a DataLoad", func(ctx context.Context) error {
		wls, err := dyn().Resource(workloadsGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		uid = ""
		for _, w := range wls.Items {
			for _, o := range w.GetOwnerReferences() {
				if o.Kind == "Job" && o.Name == "reader" {
					uid = string(w.GetUID())
				}
			}
		}
		if uid == "" {
			return fmt.Errorf("no Workload of job reader yet")
		}
		dls, err := dyn().Resource(prewarm.DataLoadResource).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: api.LabelWorkload + "=" + uid})
		if err != nil {
			return err
		}
		if len(dls.Items) != 1 {
			return fmt.Errorf("%d DataLoads of Workload %s, want 1", len(dls.Items), uid)
		}
		if o := dls.Items[0].GetOwnerReferences(); len(o) != 1 || string(o[0].UID) != uid {
			return fmt.Errorf("DataLoad %s owned by %+v, want the Workload", dls.Items[0].GetName(), o)
		}
		return nil
	})

	removeJob(t, ns, "holder")
	eventually(t, 2*time.Minute, "reader runs", jobRuns(ns, "reader", 1))
	eventually(t, time.Minute, "the admitted reader's DataLoad is gone", func(ctx context.Context) error {
		dls, err := dyn().Resource(prewarm.DataLoadResource).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: api.LabelWorkload + "=" + uid})
		if err != nil {
			return err
		}
		if len(dls.Items) > 0 {
			return fmt.Errorf("%d DataLoads left", len(dls.Items))
		}
		return nil
	})
	removeJob(t, ns, "reader")
}

// deletePodNow deletes a pod without grace and waits until it and its claims are gone.
func deletePodNow(t *testing.T, ns, name string) {
	t.Helper()
	if err := client.CoreV1().Pods(ns).Delete(t.Context(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "pod "+name+" and its claims are gone", func(ctx context.Context) error {
		if _, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod %s is still there (%v)", name, err)
		}
		return noClaimsLeft(ns)(ctx)
	})
}
