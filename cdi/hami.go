package cdi

import (
	"cmp"
	"slices"
)

// hamiLimit is HAMi-core's caps for one CUDA device of a container: its
// CUDA_DEVICE_MEMORY_LIMIT_<index> and CUDA_DEVICE_SM_LIMIT_<index>.
type hamiLimit struct {
	index     int
	memoryMiB int64
	// computePercent caps the device's SMs; 0 means no cap.
	computePercent int
}

// cudaDevice is where a GPU or MIG device sits in CUDA's PCI bus order: its GPU's host
// index (NVML's, which is PCI bus order), then, for a MIG device, its instance ids.
type cudaDevice struct{ gpu, gi, ci int }

func compareCUDA(a, b cudaDevice) int {
	return cmp.Or(cmp.Compare(a.gpu, b.gpu), cmp.Compare(a.gi, b.gi), cmp.Compare(a.ci, b.ci))
}

func cudaDevicesOf(d Device) []cudaDevice {
	if m := d.MIG; m != nil {
		return []cudaDevice{{m.Parent.Index, m.GI, m.CI}}
	}
	out := make([]cudaDevice, len(d.GPUs))
	for k, g := range d.GPUs {
		out[k] = cudaDevice{g.Index, -1, -1}
	}
	return out
}

// hamiCaps are the caps of the CUDA devices that a claim's HAMi-core shares are on.
type hamiCaps map[cudaDevice]*hamiLimit

// hamiLimitsOf are the caps of the CUDA devices that the claim's HAMi-core shares are on.
// HAMi-core reads its caps by CUDA index, and with CUDA_DEVICE_ORDER=PCI_BUS_ID (which its
// containers get) CUDA numbers a container's GPUs in PCI bus order, the order of their
// host indices, whatever the order of the claim's results or of the CDI devices. A share
// whose Limits.CUDAIndex is set (decided at prepare from every claim of its containers)
// is capped at that index; any other at its GPU's place among the claim's own devices.
// Shares of one GPU in the claim add up: their memory, and their SM caps (at most 100;
// none when one has none).
func hamiLimitsOf(devs []Device) hamiCaps {
	var all []cudaDevice
	for _, d := range devs {
		all = append(all, cudaDevicesOf(d)...)
	}
	slices.SortFunc(all, compareCUDA)
	all = slices.Compact(all)
	caps := hamiCaps{}
	for _, d := range devs {
		l := d.Limits
		if l == nil || !l.HAMi {
			continue
		}
		for _, c := range cudaDevicesOf(d) {
			h, seen := caps[c]
			if !seen {
				index, _ := slices.BinarySearchFunc(all, c, compareCUDA)
				h = &hamiLimit{index: index, computePercent: l.ComputePercent}
				caps[c] = h
			} else if h.computePercent == 0 || l.ComputePercent == 0 {
				h.computePercent = 0
			} else {
				h.computePercent = min(100, h.computePercent+l.ComputePercent)
			}
			if l.CUDAIndex != nil {
				h.index = *l.CUDAIndex
			}
			h.memoryMiB += l.MemoryMiB
		}
	}
	return caps
}

// of are the caps of the CUDA devices d is on, by index. Each device sets the caps of its
// own GPUs only: a container that is given some of the claim's devices (one request of
// it) gets no cap under an index that is another GPU's in it.
func (c hamiCaps) of(d Device) []hamiLimit {
	var out []hamiLimit
	for _, cd := range cudaDevicesOf(d) {
		if h := c[cd]; h != nil {
			out = append(out, *h)
		}
	}
	slices.SortFunc(out, func(a, b hamiLimit) int { return cmp.Compare(a.index, b.index) })
	return out
}
