package kubeletplugin_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gpudra/gpudra/driver/nvmlsim"
	plugin "github.com/gpudra/gpudra/kubeletplugin"
)

// A GPU turning unhealthy is an Event on every prepared claim that uses it, and on no other.
func TestUnhealthyGPUIsAnEventOnTheClaimsUsingIt(t *testing.T) {
	c := startOnCluster(t, newNode(t, "dgx-h100"))
	onSick := c.n.allocate(gpuClaim("2", ""))
	onHealthy := c.n.allocate(gpuClaim("5", ""))
	mustPrepare(t, c.d, onSick)
	mustPrepare(t, c.d, onHealthy)
	inject(t, c.n, 2, nvmlsim.XID(79))
	var note string
	waitFor(t, func() bool {
		for _, e := range claimEvents(t, c.client, onSick.Namespace, onSick.Name) {
			if e.Reason == plugin.ReasonGPUUnhealthy && e.Type == "Warning" {
				note = e.Note
				return true
			}
		}
		return false
	})
	if !strings.Contains(note, "GPU 2") || !strings.Contains(note, "gpu.gpudra.dev/unhealthy") {
		t.Errorf("event note %q does not name the GPU and its taint", note)
	}
	time.Sleep(200 * time.Millisecond) // the healthy GPU's claim must stay quiet
	for _, e := range claimEvents(t, c.client, onHealthy.Namespace, onHealthy.Name) {
		if e.Reason == plugin.ReasonGPUUnhealthy {
			t.Errorf("claim on the healthy GPU 5 got %s: %s", e.Reason, e.Note)
		}
	}
}
