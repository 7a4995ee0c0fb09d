package podrequests

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func container(requests, limits corev1.ResourceList) corev1.Container {
	return corev1.Container{Resources: corev1.ResourceRequirements{Requests: requests, Limits: limits}}
}

func TestEffective(t *testing.T) {
	gpu := corev1.ResourceName("nvidia.com/gpu")
	n := func(v int64) resource.Quantity { return *resource.NewQuantity(v, resource.DecimalSI) }
	for _, tc := range []struct {
		name string
		spec corev1.PodSpec
		want int64
	}{
		{"containers add up", corev1.PodSpec{Containers: []corev1.Container{
			container(corev1.ResourceList{gpu: n(1)}, nil), container(corev1.ResourceList{gpu: n(2)}, nil)}}, 3},
		{"a limit without a request counts", corev1.PodSpec{Containers: []corev1.Container{
			container(nil, corev1.ResourceList{gpu: n(2)})}}, 2},
		{"a larger init container wins", corev1.PodSpec{
			InitContainers: []corev1.Container{container(nil, corev1.ResourceList{gpu: n(4)})},
			Containers:     []corev1.Container{container(corev1.ResourceList{gpu: n(1)}, nil)}}, 4},
		{"a smaller init container does not", corev1.PodSpec{
			InitContainers: []corev1.Container{container(corev1.ResourceList{gpu: n(1)}, nil)},
			Containers:     []corev1.Container{container(corev1.ResourceList{gpu: n(2)}, nil)}}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.spec.DeepCopy()
			got := Effective(&tc.spec)
			if q := got[gpu]; q.Value() != tc.want {
				t.Errorf("Effective = %s of %s, want %d", q.String(), gpu, tc.want)
			}
			if len(tc.spec.Containers) > 0 && len(before.Containers[0].Resources.Requests) != len(tc.spec.Containers[0].Resources.Requests) {
				t.Errorf("Effective changed the pod spec")
			}
		})
	}
}
