package lab

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

func demoSlice(node string, devices ...resourcev1.Device) *resourcev1.ResourceSlice {
	return &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-slice"},
		Spec: resourcev1.ResourceSliceSpec{Driver: api.DriverName, NodeName: ptr.To(node),
			Pool: resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1}, Devices: devices},
	}
}

func demoDevice(name string, attrs map[string]resourcev1.DeviceAttribute) resourcev1.Device {
	a := map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{}
	for k, v := range attrs {
		a[resourcev1.QualifiedName(k)] = v
	}
	return resourcev1.Device{Name: name, Attributes: a}
}

// fakeLayoutPlugin plays a node's plugin: once the node carries the layout label, it sets the
// state label to state, records an Event and publishes one MIG device.
func fakeLayoutPlugin(ctx context.Context, cs kubernetes.Interface, node, state string) {
	_ = wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil || n.Labels[api.LabelMIGConfig] == "" {
			return false, nil
		}
		_, _ = cs.CoreV1().Events("default").Create(ctx, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: "e1"},
			InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: node},
			Reason:         "MIGLayoutFailed", Message: "GPU 3: too many instances", LastTimestamp: metav1.Now(),
		}, metav1.CreateOptions{})
		s := demoSlice(node, demoDevice("gpu-0-mig-1g.10gb-0", map[string]resourcev1.DeviceAttribute{"type": {StringValue: ptr.To("mig")}, "migProfile": {StringValue: ptr.To("1g.10gb")}}))
		s.Spec.Pool.Generation = 2
		s.Name += "-2"
		_, _ = cs.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{})
		n.Labels[api.LabelMIGConfigState] = state
		_, err = cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err == nil, nil
	})
}

// TestDemoAppliesAMIGLayoutByLabel: the demo labels the first static-MIG node with a
// MIG-capable GPU (not a dynamic one, not one without MIG), waits for its plugin to report,
// and shows the instances; a failed layout fails the demo with the plugin's Event.
func TestDemoAppliesAMIGLayoutByLabel(t *testing.T) {
	migCapable := map[string]resourcev1.DeviceAttribute{"type": {StringValue: ptr.To("gpu")}, "migCapable": {BoolValue: ptr.To(true)}}
	plain := map[string]resourcev1.DeviceAttribute{"type": {StringValue: ptr.To("gpu")}, "migCapable": {BoolValue: ptr.To(false)}}
	nodes := []Node{{Name: "l40s", MIG: "static"}, {Name: "dyn", MIG: "dynamic"}, {Name: "h100"}}
	for _, state := range []string{api.MIGConfigSuccess, api.MIGConfigFailed} {
		t.Run(state, func(t *testing.T) {
			cs := fake.NewClientset(
				&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "l40s", Labels: map[string]string{}}},
				&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dyn", Labels: map[string]string{}}},
				&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "h100", Labels: map[string]string{}}},
				demoSlice("l40s", demoDevice("gpu-0", plain)), demoSlice("dyn", demoDevice("gpu-0", migCapable)),
				demoSlice("h100", demoDevice("gpu-0", migCapable)),
			)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			go fakeLayoutPlugin(ctx, cs, "h100", state)
			var out bytes.Buffer
			err := demoMIGLayoutStep(ctx, &out, cs, &State{Nodes: nodes}, 10*time.Second)
			n, _ := cs.CoreV1().Nodes().Get(ctx, "h100", metav1.GetOptions{})
			if got := n.Labels[api.LabelMIGConfig]; got != DemoMIGLayout {
				t.Errorf("node h100 labelled %q, want %s", got, DemoMIGLayout)
			}
			for _, other := range []string{"l40s", "dyn"} {
				if n, _ := cs.CoreV1().Nodes().Get(ctx, other, metav1.GetOptions{}); n.Labels[api.LabelMIGConfig] != "" {
					t.Errorf("node %s was labelled too", other)
				}
			}
			if state == api.MIGConfigSuccess {
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(out.String(), "1 × 1g.10gb") {
					t.Errorf("the demo does not show the node's instances:\n%s", out.String())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "GPU 3: too many instances") {
				t.Errorf("a failed layout: error %v, want the plugin's Event", err)
			}
		})
	}
}
