//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/lab"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

const attr = api.DriverName // the domain of gpudra's device attributes

// eventually polls cond every 250 ms until it holds or timeout passes; on timeout the test
// fails with what and cond's last complaint.
func eventually(t *testing.T, timeout time.Duration, what string, cond func(context.Context) error) {
	t.Helper()
	var last error
	start := time.Now()
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		err := cond(ctx)
		// A complaint that is only the poll's own deadline (a call cut short, a client rate
		// limiter refusing to wait past it) hides the one before, which says what was wrong.
		if last == nil || err == nil || !(errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "would exceed context deadline")) {
			last = err
		}
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("%s: not true after %s: %v", what, timeout, last)
	}
	t.Logf("%s (after %s)", what, time.Since(start).Round(10*time.Millisecond))
}

// namespace creates a namespace for one test and deletes it afterwards.
func namespace(t *testing.T, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := client.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	t.Cleanup(func() { deleteNamespace(t, name) })
	// The API server refuses pods until the namespace's default ServiceAccount exists.
	eventually(t, time.Minute, "namespace "+name+" has its default ServiceAccount", func(ctx context.Context) error {
		_, err := client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
	return name
}

// deleteNamespace deletes a namespace and waits until it is gone, so that the devices its
// claims held are free for the next test.
func deleteNamespace(t *testing.T, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// kwok honours the 30 s grace period of a pod like a kubelet whose container ignores
	// SIGTERM; the tests do not need to wait for that.
	if err := client.CoreV1().Pods(name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete the pods of namespace %s: %v", name, err)
	}
	if err := client.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete namespace %s: %v", name, err)
		return
	}
	start := time.Now()
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("namespace %s still there after 2 minutes", name)
		return
	}
	t.Logf("namespace %s deleted (after %s)", name, time.Since(start).Round(10*time.Millisecond))
}

// apply applies YAML documents (server-side) into the lab.
func apply(t *testing.T, manifests string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := lab.DecodeManifests([]byte(manifests))
	if err != nil {
		t.Fatalf("decode manifests: %v", err)
	}
	ap, err := lab.NewApplier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := ap.Apply(t.Context(), objs...); err != nil {
		t.Fatal(err)
	}
	return objs
}

// teamQueue is the LocalQueue "team" of namespace ns on ClusterQueue cq, as YAML.
func teamQueue(ns, cq string) string {
	return `
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team, namespace: ` + ns + `}
spec: {clusterQueue: ` + cq + `}
`
}

// decode decodes YAML documents for a test that changes them before applyForTest.
func decode(t *testing.T, manifests string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := lab.DecodeManifests([]byte(manifests))
	if err != nil {
		t.Fatalf("decode manifests: %v", err)
	}
	return objs
}

// applyForTest applies objects that outlive namespaces (Kueue ClusterQueues, flavors,
// priority classes) and deletes, when the test ends, those that the lab did not hold
// before: an object the lab installed (the gpudra-topology AdmissionCheck) stays for the
// tests after it.
func applyForTest(t *testing.T, objs ...*unstructured.Unstructured) {
	t.Helper()
	ap, err := lab.NewApplier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	created, err := ap.Missing(t.Context(), objs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ap.Delete(context.Background(), created...); err != nil {
			t.Errorf("clean up: %v", err)
		}
	})
	if err := ap.Apply(t.Context(), objs...); err != nil {
		t.Fatal(err)
	}
}

// podRunning is a condition: the pod exists and runs.
func podRunning(ns, name string) func(context.Context) error {
	return func(ctx context.Context) error {
		p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("pod %s/%s is %s%s", ns, name, p.Status.Phase, schedulingMessage(p))
		}
		return nil
	}
}

func schedulingMessage(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
			return fmt.Sprintf(" (%s: %s)", c.Reason, c.Message)
		}
	}
	return ""
}

// publishedDevices indexes every published device of the gpudra driver by pool/device.
func publishedDevices(ctx context.Context, t *testing.T) map[string]resourcev1.Device {
	t.Helper()
	out := map[string]resourcev1.Device{}
	for _, n := range state.Nodes {
		slices, err := lab.NodeSlices(ctx, client, n.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range slices {
			for _, d := range s.Spec.Devices {
				out[s.Spec.Pool.Name+"/"+d.Name] = d
			}
		}
	}
	return out
}

// allocated returns the claim's allocation results of the gpudra driver.
func allocated(ctx context.Context, ns, claim string) ([]resourcev1.DeviceRequestAllocationResult, error) {
	c, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if c.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s/%s is not allocated", ns, claim)
	}
	var out []resourcev1.DeviceRequestAllocationResult
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver == api.DriverName {
			out = append(out, r)
		}
	}
	return out, nil
}

func stringAttr(d resourcev1.Device, name string) string {
	for _, k := range []resourcev1.QualifiedName{resourcev1.QualifiedName(name), resourcev1.QualifiedName(attr + "/" + name)} {
		if a, ok := d.Attributes[k]; ok {
			switch {
			case a.StringValue != nil:
				return *a.StringValue
			case a.IntValue != nil:
				return fmt.Sprint(*a.IntValue)
			case a.BoolValue != nil:
				return fmt.Sprint(*a.BoolValue)
			case a.VersionValue != nil:
				return *a.VersionValue
			}
		}
	}
	return ""
}

// nodeProfile returns the simulated profile of a lab node.
func nodeProfile(node string) string {
	for _, n := range state.Nodes {
		if n.Name == node {
			return n.Profile
		}
	}
	return ""
}

func join[T any](xs []T, f func(T) string) string {
	var s []string
	for _, x := range xs {
		s = append(s, f(x))
	}
	return strings.Join(s, ", ")
}

var claimsGVR = schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceclaims"}

// dyn is a dynamic client for the lab.
func dyn() dynamic.Interface { return dynamic.NewForConfigOrDie(cfg) }

// deleteJobNow deletes a Job and its pods at once (not after their grace period), freeing
// their quota and devices.
func deleteJobNow(t *testing.T, ns, job string) {
	t.Helper()
	bg := metav1.DeletePropagationBackground
	if err := dyn().Resource(jobsGVR).Namespace(ns).Delete(t.Context(), job, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	if err := client.CoreV1().Pods(ns).DeleteCollection(t.Context(), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{LabelSelector: "job-name=" + job}); err != nil {
		t.Fatal(err)
	}
}
