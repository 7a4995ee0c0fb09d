package kubeletplugin

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/miglayout"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// planGPULayout places the entry's MIG devices on g, or says why g cannot hold them.
func planGPULayout(g *driver.GPU, e miglayout.Entry) (gpuLayout, error) {
	p := gpuLayout{gpu: g, enabled: e.MIGEnabled}
	where := fmt.Sprintf("GPU %d (%s)", g.Index, g.ProductName)
	if !e.MIGEnabled {
		return p, nil
	}
	if g.MIG == nil {
		return p, fmt.Errorf("%s is not MIG-capable", where)
	}
	offered := map[string]driver.MIGProfile{}
	maxCompute := 0
	var names []string
	for _, mp := range g.MIG.Profiles {
		offered[mp.Name] = mp
		names = append(names, mp.Name)
		maxCompute = max(maxCompute, mp.ComputeSlices)
	}
	// Each count is checked against the GPU before the entry is expanded to instances.
	for _, name := range slices.Sorted(maps.Keys(e.MIGDevices)) {
		mp, ok := offered[name]
		if !ok {
			return p, fmt.Errorf("%s does not offer MIG profile %s (it offers %s)", where, name, strings.Join(names, ", "))
		}
		if n := e.MIGDevices[name]; n > mp.InstanceLimit() {
			return p, fmt.Errorf("%s holds at most %d instance(s) of MIG profile %s, the layout asks for %d", where, mp.InstanceLimit(), name, n)
		}
	}
	p.profiles = e.Profiles()
	if p.profiles == nil {
		p.profiles = []string{}
	}
	compute := 0
	for _, name := range p.profiles {
		compute += offered[name].ComputeSlices
	}
	if compute > maxCompute {
		return p, fmt.Errorf("%s cannot hold %s: they need %d compute slices, the GPU has %d", where, strings.Join(p.profiles, " "), compute, maxCompute)
	}
	used := make([]bool, g.MIG.MemorySlices)
	placed := make([]prepared.MIGInstance, len(p.profiles))
	var place func(k int) bool
	place = func(k int) bool {
		if k == len(p.profiles) {
			return true
		}
		mp := offered[p.profiles[k]]
		for _, pl := range slices.Backward(mp.Placements) { // the highest free placement first, as mig-manager
			if pl.Start+pl.Size > len(used) || slices.Contains(used[pl.Start:pl.Start+pl.Size], true) {
				continue
			}
			for i := pl.Start; i < pl.Start+pl.Size; i++ {
				used[i] = true
			}
			placed[k] = prepared.MIGInstance{Parent: g.Index, Profile: mp.Name, GIProfileID: mp.GIProfileID, CIProfileID: mp.CIProfileID, Start: pl.Start, Size: pl.Size}
			if place(k + 1) {
				return true
			}
			for i := pl.Start; i < pl.Start+pl.Size; i++ {
				used[i] = false
			}
		}
		return false
	}
	if !place(0) {
		return p, fmt.Errorf("%s cannot hold %s: no placement of them fits its %d memory slices", where, strings.Join(p.profiles, " "), g.MIG.MemorySlices)
	}
	p.instances = placed
	return p, nil
}
