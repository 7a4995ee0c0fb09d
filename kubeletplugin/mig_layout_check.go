package kubeletplugin

import (
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/miglayout"
)

// CheckMIGLayoutEntry says why g cannot be partitioned as the layout entry e says (MIG
// not available, a profile g does not offer, more than its slices), with the planner the
// plugin applies layouts with; nil when g can. Tools check layout files with it.
func CheckMIGLayoutEntry(g *driver.GPU, e miglayout.Entry) error {
	_, err := planGPULayout(g, e)
	return err
}
