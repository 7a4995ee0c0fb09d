package allocation

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Features are the allocator features a Kubernetes 1.37 cluster has on by default that
// gpudra's slices use (partitionable devices, consumable capacity, prioritized lists,
// device taints, admin access).
var Features = structured.Features{
	AdminAccess:          true,
	ConsumableCapacity:   true,
	DeviceTaints:         true,
	PartitionableDevices: true,
	PrioritizedList:      true,
}

// celCache holds compiled selectors for every State: states are often made per node or per
// decision, and compiling the same DeviceClass selectors again for each was a fifth of a
// trace replay's time. The cache is safe for concurrent use.
var celCache = cel.NewCache(1000, cel.Features{EnableConsumableCapacity: true})

// ErrUnsatisfiable is returned when the claims do not fit on the node.
var ErrUnsatisfiable = errors.New("claims cannot be allocated on this node")

// State is a cluster's DRA view: slices, classes and what is already allocated.
// It is not safe for concurrent mutation.
type State struct {
	slices []*resourceapi.ResourceSlice
	// nodeLocal holds each node's own slices (spec.nodeName) and shared the others (node
	// selectors, all nodes), so that allocating on one node looks only at what that node
	// can use: the allocator gathers every slice it is given on each call, which on a
	// 640-node cluster cost more than the allocation itself.
	nodeLocal map[string][]*resourceapi.ResourceSlice
	shared    []*resourceapi.ResourceSlice
	classes   classLister
	allocated structured.AllocatedState
	// shares counts the allocated shares of each device that allows several allocations
	// (the devices of AllocatedSharedDeviceIDs, without walking all of them).
	shares   map[structured.DeviceID]int
	celCache *cel.Cache
}

// New builds a state with nothing allocated.
func New(classes []*resourceapi.DeviceClass, slices []*resourceapi.ResourceSlice) *State {
	cl := classLister{}
	for _, c := range classes {
		cl[c.Name] = c
	}
	local := map[string][]*resourceapi.ResourceSlice{}
	var shared []*resourceapi.ResourceSlice
	for _, sl := range slices {
		if n := sl.Spec.NodeName; n != nil && *n != "" {
			local[*n] = append(local[*n], sl)
		} else {
			shared = append(shared, sl)
		}
	}
	return &State{
		slices:    slices,
		nodeLocal: local,
		shared:    shared,
		classes:   cl,
		celCache:  celCache,
		allocated: structured.AllocatedState{
			AllocatedDevices:         sets.New[structured.DeviceID](),
			AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
			AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
		},
	}
}

// Slices returns the state's slices.
func (s *State) Slices() []*resourceapi.ResourceSlice { return s.slices }

// Allocate asks the real allocator to allocate the claims together on the node, as
// kube-scheduler would. It returns one result per claim, or ErrUnsatisfiable. Nothing is
// recorded: call Commit to mark the devices as used.
func (s *State) Allocate(ctx context.Context, nodeName string, claims ...*resourceapi.ResourceClaim) ([]resourceapi.AllocationResult, error) {
	slices := s.nodeLocal[nodeName]
	if len(s.shared) > 0 {
		slices = append(slices[:len(slices):len(slices)], s.shared...)
	}
	alloc, err := structured.NewAllocator(ctx, Features, s.allocated, s.classes, slices, s.celCache)
	if err != nil {
		return nil, fmt.Errorf("creating allocator: %w", err)
	}
	return AllocateOn(ctx, alloc, nodeName, claims...)
}

// Allocator returns the real allocator over the current state, the way kube-scheduler
// builds one per pod in PreFilter and then asks it once per candidate node in Filter.
// It sees later Commits only if built after them.
func (s *State) Allocator(ctx context.Context) (structured.Allocator, error) {
	alloc, err := structured.NewAllocator(ctx, Features, s.allocated, s.classes, s.slices, s.celCache)
	if err != nil {
		return nil, fmt.Errorf("creating allocator: %w", err)
	}
	return alloc, nil
}

// AllocateOn asks an allocator to place the claims on one node; see State.Allocate.
func AllocateOn(ctx context.Context, alloc structured.Allocator, nodeName string, claims ...*resourceapi.ResourceClaim) ([]resourceapi.AllocationResult, error) {
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{"kubernetes.io/hostname": nodeName}}}
	results, err := alloc.Allocate(ctx, node, claims)
	if err != nil {
		return nil, err
	}
	if results == nil {
		return nil, ErrUnsatisfiable
	}
	return results, nil
}

// AllocateAndCommit allocates and, when it fits, records the result.
func (s *State) AllocateAndCommit(ctx context.Context, nodeName string, claims ...*resourceapi.ResourceClaim) ([]resourceapi.AllocationResult, error) {
	results, err := s.Allocate(ctx, nodeName, claims...)
	if err != nil {
		return nil, err
	}
	for k := range results {
		s.Commit(&results[k])
	}
	return results, nil
}

// Commit records an allocation result as in use, the way the scheduler's view of
// allocated claims does: exclusive devices by id, shares by share id plus the capacity
// they consume.
func (s *State) Commit(r *resourceapi.AllocationResult) {
	for _, d := range r.Devices.Results {
		id := structured.MakeDeviceID(d.Driver, d.Pool, d.Device)
		if d.ShareID != nil {
			shared := structured.MakeSharedDeviceID(id, d.ShareID)
			if !s.allocated.AllocatedSharedDeviceIDs.Has(shared) {
				if s.shares == nil {
					s.shares = map[structured.DeviceID]int{}
				}
				s.shares[id]++
			}
			s.allocated.AllocatedSharedDeviceIDs.Insert(shared)
			s.allocated.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, d.ConsumedCapacity))
			continue
		}
		s.allocated.AllocatedDevices.Insert(id)
	}
}

// Taken reports whether a device the result allocates whole is already allocated in s.
// Committing such a result again would count one device for two claims.
func (s *State) Taken(r *resourceapi.AllocationResult) bool {
	for _, d := range r.Devices.Results {
		if d.ShareID == nil && s.allocated.AllocatedDevices.Has(structured.MakeDeviceID(d.Driver, d.Pool, d.Device)) {
			return true
		}
	}
	return false
}

// Release returns an allocation result's devices.
func (s *State) Release(r *resourceapi.AllocationResult) {
	for _, d := range r.Devices.Results {
		id := structured.MakeDeviceID(d.Driver, d.Pool, d.Device)
		if d.ShareID != nil {
			shared := structured.MakeSharedDeviceID(id, d.ShareID)
			if s.allocated.AllocatedSharedDeviceIDs.Has(shared) {
				if s.shares[id]--; s.shares[id] <= 0 {
					delete(s.shares, id)
				}
			}
			s.allocated.AllocatedSharedDeviceIDs.Delete(shared)
			s.allocated.AggregatedCapacity.Remove(structured.NewDeviceConsumedCapacity(id, d.ConsumedCapacity))
			continue
		}
		s.allocated.AllocatedDevices.Delete(id)
	}
}

// Devices lists the device names of an allocation result, in request order.
func Devices(r resourceapi.AllocationResult) []string {
	out := make([]string, 0, len(r.Devices.Results))
	for _, d := range r.Devices.Results {
		out = append(out, d.Device)
	}
	return out
}

// SortedDevices is Devices, sorted.
func SortedDevices(r resourceapi.AllocationResult) []string {
	out := Devices(r)
	sort.Strings(out)
	return out
}

type classLister map[string]*resourceapi.DeviceClass

func (c classLister) all() []*resourceapi.DeviceClass {
	out := make([]*resourceapi.DeviceClass, 0, len(c))
	for _, dc := range c {
		out = append(out, dc)
	}
	return out
}

func (c classLister) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(c))
	for _, v := range c {
		out = append(out, v)
	}
	return out, nil
}

func (c classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if v, ok := c[name]; ok {
		return v, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}

// Empty is s with nothing allocated: the same devices and classes, all free.
func (s *State) Empty() *State {
	return New(s.classes.all(), s.slices)
}

// Clone returns an independent copy: allocating on it leaves s unchanged. Slices and
// classes are shared (they are read-only).
func (s *State) Clone() *State {
	c := *s
	c.allocated = structured.AllocatedState{
		AllocatedDevices:         s.allocated.AllocatedDevices.Clone(),
		AllocatedSharedDeviceIDs: s.allocated.AllocatedSharedDeviceIDs.Clone(),
		AggregatedCapacity:       s.allocated.AggregatedCapacity.Clone(),
	}
	c.shares = maps.Clone(s.shares)
	return &c
}

// FromCluster builds the state of a live cluster from its listed DeviceClasses,
// ResourceSlices and ResourceClaims: every allocated claim's devices are committed and
// recorded, by "namespace/name", in the returned Holders.
func FromCluster(classes []resourceapi.DeviceClass, slices []resourceapi.ResourceSlice, claims []resourceapi.ResourceClaim) (*State, Holders) {
	sp := make([]*resourceapi.ResourceSlice, len(slices))
	for k := range slices {
		sp[k] = &slices[k]
	}
	cp := make([]*resourceapi.DeviceClass, len(classes))
	for k := range classes {
		cp[k] = &classes[k]
	}
	st := New(cp, sp)
	holders := Holders{}
	for k := range claims {
		if a := claims[k].Status.Allocation; a != nil {
			st.Commit(a)
			holders.AddHolder(claims[k].Namespace+"/"+claims[k].Name, a)
		}
	}
	return st, holders
}
