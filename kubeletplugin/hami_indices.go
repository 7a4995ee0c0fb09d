package kubeletplugin

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// HAMi-core caps a container's GPUs by CUDA index, and CUDA numbers all the GPUs a
// container gets, from every claim, in PCI bus order. A claim's spec is written once, at
// its prepare, for every container that uses it. So when a container gets gpudra devices
// from more than one claim, the CUDA index of each GPU that the claim's HAMi-core shares
// are on is decided here from all of them, recorded in the share's cdi.Limits.CUDAIndex,
// and a claim whose containers would need different indices is refused.

// cudaPlace is one CUDA device a container sees: its GPU's host index (PCI bus order),
// and for a MIG device its published name. MIG devices of a GPU take their GPU's place
// among themselves in an order no HAMi-core share depends on: a share and a MIG device
// are never on one GPU.
type cudaPlace struct {
	gpu int
	mig string
}

func compareCUDAPlace(a, b cudaPlace) int {
	return cmp.Or(cmp.Compare(a.gpu, b.gpu), cmp.Compare(a.mig, b.mig))
}

func placesOf(d prepared.Device) []cudaPlace {
	if d.MIG != nil {
		return []cudaPlace{{d.MIG.Parent, d.Device}}
	}
	out := make([]cudaPlace, len(d.GPUs))
	for k, g := range d.GPUs {
		out[k] = cudaPlace{gpu: g}
	}
	return out
}

// sortedPlaces numbers devices as CUDA does: their places, sorted, each once.
func sortedPlaces(devs []prepared.Device) []cudaPlace {
	var all []cudaPlace
	for _, d := range devs {
		all = append(all, placesOf(d)...)
	}
	slices.SortFunc(all, compareCUDAPlace)
	return slices.Compact(all)
}

func isHAMi(d prepared.Device) bool { return d.CDI.Limits != nil && d.CDI.Limits.HAMi }

// hamiGPUs are the GPUs that HAMi-core shares among devs are on.
func hamiGPUs(devs []prepared.Device) []int {
	var out []int
	for _, d := range devs {
		if isHAMi(d) {
			out = append(out, d.GPUs...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ownIndices are the CUDA indices a claim's HAMi-core shares are capped at: the index
// decided at its prepare, else their GPU's place among the claim's own devices.
func ownIndices(devs []prepared.Device) map[int]int {
	all := sortedPlaces(devs)
	out := map[int]int{}
	for _, d := range devs {
		if !isHAMi(d) {
			continue
		}
		for _, g := range d.GPUs {
			if l := d.CDI.Limits; l.CUDAIndex != nil {
				out[g] = *l.CUDAIndex
			} else {
				out[g], _ = slices.BinarySearchFunc(all, cudaPlace{gpu: g}, compareCUDAPlace)
			}
		}
	}
	return out
}

// seenClaim is a gpudra claim as one container gets it: the devices it sees of it on this
// node. capped, for a claim prepared on this node before, are the CUDA indices its
// HAMi-core caps are written under, by GPU (ownIndices of all its devices).
type seenClaim struct {
	name    string // namespace/name
	uid     types.UID
	devices []prepared.Device
	capped  map[int]int
}

// containerView is one container that uses the claim being prepared, with every gpudra
// claim it gets on this node.
type containerView struct {
	name   string // pod/container
	claims []seenClaim
}

// decideHAMiIndices is the CUDA index, in the containers of views, of each GPU that the
// HAMi-core shares of claim uid are on, and nil when each is its place among the claim's
// own devices (own), as a claim alone in its containers is numbered. It refuses two
// claims that give one container devices of a GPU that a HAMi-core share is on (HAMi-core
// has one cap per GPU), containers that need different indices for one GPU of the claim,
// and a container that needs other indices than a claim prepared before caps its GPUs at.
func decideHAMiIndices(uid types.UID, own []prepared.Device, views []containerView) (map[int]int, error) {
	want, by := map[int]int{}, map[int]string{}
	for _, v := range views {
		var devs []prepared.Device
		for _, c := range v.claims {
			devs = append(devs, c.devices...)
		}
		all := sortedPlaces(devs)
		for _, c := range v.claims {
			if c.uid != uid && c.capped == nil {
				continue // not numbered yet: its own prepare checks it
			}
			gpus := hamiGPUs(c.devices)
			if len(gpus) == 0 {
				continue
			}
			if err := checkSharedGPU(v, c, gpus); err != nil {
				return nil, err
			}
			for _, g := range gpus {
				index, _ := slices.BinarySearchFunc(all, cudaPlace{gpu: g}, compareCUDAPlace)
				if c.uid != uid {
					if c.capped[g] != index {
						return nil, fmt.Errorf("container %s gets claim %s, prepared on this node before, whose HAMi-core caps of GPU %d are written under CUDA index %d, but with its other gpudra claims the container sees that GPU at CUDA index %d: HAMi-core would cap the wrong GPU. A claim's caps are written once, when it is prepared; give the container its HAMi-core shares in one claim, or give claim %s only to containers that get the same other gpudra claims",
							v.name, c.name, g, c.capped[g], index, c.name)
					}
					continue
				}
				if by[g] != "" && want[g] != index {
					return nil, fmt.Errorf("claim %s is used by containers that see its GPU %d at different CUDA indices (%d in %s, %d in %s: they get different other gpudra claims), and its HAMi-core caps are written once for all of them: give these containers the same gpudra claims, or put each container's shares in a claim of its own",
						c.name, g, want[g], by[g], index, v.name)
				}
				want[g], by[g] = index, v.name
			}
		}
	}
	alone := ownIndices(own)
	for g, index := range want {
		if alone[g] != index {
			return want, nil
		}
	}
	return nil, nil
}

// checkSharedGPU refuses another claim of the container with a device on one of gpus,
// the GPUs that HAMi-core shares of claim c are on.
func checkSharedGPU(v containerView, c seenClaim, gpus []int) error {
	for _, o := range v.claims {
		if o.uid == c.uid {
			continue
		}
		for _, d := range o.devices {
			for _, p := range placesOf(d) {
				if _, found := slices.BinarySearch(gpus, p.gpu); found {
					return fmt.Errorf("claims %s and %s both give container %s a device of GPU %d, and HAMi-core has one cap per GPU, which would be one claim's or the other's: put both shares in one claim, as two requests",
						c.name, o.name, v.name, p.gpu)
				}
			}
		}
	}
	return nil
}

// numberHAMi sets the CUDA index of the claim's HAMi-core shares (cdi.Limits.CUDAIndex)
// when their containers get gpudra devices from other claims too, or refuses the claim
// (decideHAMiIndices). It reads the claim's pods and their other claims only when another
// claim may share a container with it: another claim of the kubelet's call (batch), or
// one prepared on this node; and only when the claim has HAMi-core shares, or a claim
// prepared on this node does (whose caps a new neighbour could contradict). A read that
// fails fails the prepare, which the kubelet retries: it never guesses.
func (s *state) numberHAMi(claim *resourceapi.ResourceClaim, planned []prepared.Device, reads *claimReads, batch []*resourceapi.ResourceClaim) error {
	if s.planner.api == nil {
		return nil
	}
	others, preparedHAMi := false, false
	for _, c := range batch {
		others = others || c.UID != claim.UID
	}
	for uid, pc := range s.cp.Claims {
		if uid != claim.UID {
			others = true
			preparedHAMi = preparedHAMi || len(hamiGPUs(pc.Devices)) > 0
		}
	}
	if !preparedHAMi && (!others || len(hamiGPUs(planned)) == 0) {
		return nil
	}
	views, err := s.containerViews(claim, planned, reads)
	if err != nil {
		return fmt.Errorf("numbering the claim's GPUs for HAMi-core as CUDA numbers them in its containers: %w", err)
	}
	indices, err := decideHAMiIndices(claim.UID, planned, views)
	if err != nil {
		return err
	}
	s.logger.V(2).Info("HAMi-core CUDA indices from the claim's containers", "claim", klog.KObj(claim),
		"containers", len(views), "indices", indices)
	if indices == nil {
		return nil
	}
	alone := ownIndices(planned)
	for k := range planned {
		d := &planned[k]
		if !isHAMi(*d) {
			continue
		}
		index, decided := indices[d.GPUs[0]]
		if !decided {
			index = alone[d.GPUs[0]] // no container sees it
		}
		d.CDI.Limits.CUDAIndex = &index
	}
	return nil
}

// containerViews are the containers of the claim's pods that use it, each with the gpudra
// claims it gets on this node.
func (s *state) containerViews(claim *resourceapi.ResourceClaim, planned []prepared.Device, reads *claimReads) ([]containerView, error) {
	pods, err := reads.reservedPods()
	if err != nil {
		return nil, err
	}
	claims := map[string]*resourceapi.ResourceClaim{claim.Name: claim}
	var out []containerView
	for _, pod := range pods {
		for _, ctr := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
			v, uses, err := s.containerView(pod, ctr, claim, planned, claims)
			if err != nil {
				return nil, err
			}
			if uses {
				out = append(out, v)
			}
		}
	}
	return out, nil
}

// containerView is what ctr gets from gpudra claims on this node, and whether it uses
// claim. claims caches the claims read, by name, in the pods' namespace.
func (s *state) containerView(pod *corev1.Pod, ctr corev1.Container, claim *resourceapi.ResourceClaim, planned []prepared.Device,
	claims map[string]*resourceapi.ResourceClaim) (containerView, bool, error) {
	v := containerView{name: pod.Name + "/" + ctr.Name}
	requests := map[string][]string{} // claim name → requests the container takes ("": all)
	var order []string
	for _, ref := range ctr.Resources.Claims {
		name, err := podClaimName(pod, ref.Name)
		if err != nil {
			return v, false, err
		}
		if name == "" {
			continue
		}
		if _, seen := requests[name]; !seen {
			order = append(order, name)
		}
		requests[name] = append(requests[name], ref.Request)
	}
	if _, uses := requests[claim.Name]; !uses {
		return v, false, nil
	}
	for _, name := range order {
		c, err := s.readClaim(pod.Namespace, name, claims)
		if err != nil {
			return v, false, err
		}
		seen := seenClaim{name: pod.Namespace + "/" + name, uid: c.UID}
		switch pc := s.cp.Claims[c.UID]; {
		case c.UID == claim.UID:
			seen.devices = planned
		case pc != nil && pc.State == prepared.PrepareCompleted:
			seen.devices, seen.capped = pc.Devices, ownIndices(pc.Devices)
		default:
			if seen.devices, err = s.planner.allocated(c); err != nil {
				return v, false, err
			}
		}
		seen.devices = slices.DeleteFunc(slices.Clone(seen.devices), func(d prepared.Device) bool {
			return !takes(requests[name], d.Request)
		})
		if len(seen.devices) > 0 {
			v.claims = append(v.claims, seen)
		}
	}
	return v, true, nil
}

// takes reports whether a container that asks a claim for requests ("" is the whole
// claim) gets the result of request (a subrequest of firstAvailable is "<request>/<sub>").
func takes(requests []string, request string) bool {
	for _, r := range requests {
		if r == "" || r == request || strings.HasPrefix(request, r+"/") {
			return true
		}
	}
	return false
}

func (s *state) readClaim(namespace, name string, cache map[string]*resourceapi.ResourceClaim) (*resourceapi.ResourceClaim, error) {
	if c := cache[name]; c != nil {
		return c, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), apiReadTimeout)
	defer cancel()
	c, err := s.planner.api.claim(ctx, namespace, name)
	if err != nil {
		return nil, fmt.Errorf("reading claim %s/%s: %w", namespace, name, err)
	}
	cache[name] = c
	return c, nil
}

// podClaimName is the name of the ResourceClaim the pod's claim entry name stands for;
// "" when its template made none.
func podClaimName(pod *corev1.Pod, name string) (string, error) {
	for _, pc := range pod.Spec.ResourceClaims {
		if pc.Name != name {
			continue
		}
		if pc.ResourceClaimName != nil {
			return *pc.ResourceClaimName, nil
		}
		for _, st := range pod.Status.ResourceClaimStatuses {
			if st.Name == name {
				if st.ResourceClaimName == nil {
					return "", nil
				}
				return *st.ResourceClaimName, nil
			}
		}
		return "", fmt.Errorf("pod %s/%s: spec.resourceClaims %q is made from a template, and status.resourceClaimStatuses does not name its claim yet", pod.Namespace, pod.Name, name)
	}
	return "", fmt.Errorf("pod %s/%s: a container uses claim %q, which is not in spec.resourceClaims", pod.Namespace, pod.Name, name)
}

// allocated are the devices of a claim not prepared here that its allocation gives on
// this node, with what a CUDA index depends on: their GPUs, and which are MIG devices.
func (p *planner) allocated(c *resourceapi.ResourceClaim) ([]prepared.Device, error) {
	if c.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s/%s is not allocated yet", c.Namespace, c.Name)
	}
	var out []prepared.Device
	for k, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != api.DriverName || r.Pool != p.nodeName {
			continue
		}
		pub, ok := p.devices[r.Device]
		if !ok {
			return nil, fmt.Errorf("claim %s/%s: status.allocation.devices.results[%d]: device %q is not published by this node", c.Namespace, c.Name, k, r.Device)
		}
		info, err := readPublished(pub)
		if err != nil {
			return nil, fmt.Errorf("claim %s/%s: status.allocation.devices.results[%d]: %w", c.Namespace, c.Name, k, err)
		}
		d := prepared.Device{Request: r.Request, Pool: r.Pool, Device: r.Device, Type: info.Type, GPUs: info.GPUs}
		if info.Type == api.TypeMIG {
			d.MIG = &prepared.MIGInstance{Parent: info.GPUs[0]}
		}
		out = append(out, d)
	}
	return out, nil
}
