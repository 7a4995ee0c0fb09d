package explain

import (
	"testing"

	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// A Workload's priority is shown with the class it came from: the job's
// WorkloadPriorityClass, its pods' PriorityClass, or none.
func TestPriorityOfSaysWhereItCameFrom(t *testing.T) {
	for _, c := range []struct {
		name string
		spec kueue.WorkloadSpec
		want string
	}{
		{name: "from the pods' PriorityClass",
			spec: kueue.WorkloadSpec{Priority: ptr.To[int32](1000), PriorityClassRef: kueue.NewPodPriorityClassRef("high")},
			want: "1000 (PriorityClass high)"},
		{name: "from the job's WorkloadPriorityClass",
			spec: kueue.WorkloadSpec{Priority: ptr.To[int32](100), PriorityClassRef: kueue.NewWorkloadPriorityClassRef("research")},
			want: "100 (WorkloadPriorityClass research)"},
		{name: "no class", spec: kueue.WorkloadSpec{Priority: ptr.To[int32](0)}, want: "0 (no priority class)"},
		{name: "a negative value", spec: kueue.WorkloadSpec{Priority: ptr.To[int32](-5), PriorityClassRef: kueue.NewPodPriorityClassRef("scavenger")},
			want: "-5 (PriorityClass scavenger)"},
		{name: "no priority set yet counts as 0", want: "0 (no priority class)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := PriorityOf(&kueue.Workload{Spec: c.spec}).String(); got != c.want {
				t.Errorf("priority %q, want %q", got, c.want)
			}
		})
	}
}
