package fragmentation

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
)

// scaleDRA is the scheduler's DRA manager over the benchmark's cluster: the slices, the
// pending claims, and the allocated state, which GatherAllocatedState copies as
// kube-scheduler's does.
type scaleDRA struct {
	slices  []*resourceapi.ResourceSlice
	classes classLister
	claims  map[string]*resourceapi.ResourceClaim
	state   *structured.AllocatedState
}

func (d *scaleDRA) gather() *structured.AllocatedState {
	return &structured.AllocatedState{
		AllocatedDevices:         d.state.AllocatedDevices.Clone(),
		AllocatedSharedDeviceIDs: d.state.AllocatedSharedDeviceIDs.Clone(),
		AggregatedCapacity:       d.state.AggregatedCapacity.Clone(),
	}
}

func (d *scaleDRA) ResourceClaims() fwk.ResourceClaimTracker { return scaleClaims{d} }
func (d *scaleDRA) ResourceSlices() fwk.ResourceSliceLister  { return scaleSlices{d} }
func (d *scaleDRA) DeviceClasses() fwk.DeviceClassLister     { return d.classes }
func (d *scaleDRA) DeviceClassResolver() fwk.DeviceClassResolver {
	return noExtendedResources{}
}

type scaleClaims struct {
	*scaleDRA
}

func (c scaleClaims) Get(namespace, name string) (*resourceapi.ResourceClaim, error) {
	if cl, ok := c.claims[name]; ok {
		return cl, nil
	}
	return nil, fmt.Errorf("claim %s/%s not found", namespace, name)
}
func (c scaleClaims) GatherAllocatedState() (*structured.AllocatedState, error) {
	return c.gather(), nil
}
func (c scaleClaims) List() ([]*resourceapi.ResourceClaim, error) { panic("not used") }
func (c scaleClaims) ListAllAllocatedDevices() (sets.Set[structured.DeviceID], error) {
	return c.state.AllocatedDevices.Clone(), nil
}
func (c scaleClaims) SignalClaimPendingAllocation(types.UID, *resourceapi.ResourceClaim) error {
	panic("not used")
}
func (c scaleClaims) GetPendingAllocation(types.UID) *resourceapi.AllocationResult { return nil }
func (c scaleClaims) MaybeRemoveClaimPendingAllocation(types.UID, bool) bool       { return false }
func (c scaleClaims) AssumeClaimAfterAPICall(*resourceapi.ResourceClaim) error     { panic("not used") }
func (c scaleClaims) AssumedClaimRestore(string, string)                           {}

type scaleSlices struct{ *scaleDRA }

func (s scaleSlices) ListWithDeviceTaintRules() ([]*resourceapi.ResourceSlice, error) {
	return s.slices, nil
}

type noExtendedResources struct{}

func (noExtendedResources) GetDeviceClass(corev1.ResourceName) *resourceapi.DeviceClass { return nil }

type classLister []*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) { return l, nil }
func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	for _, c := range l {
		if c.Name == name {
			return c, nil
		}
	}
	return nil, fmt.Errorf("device class %s not found", name)
}
