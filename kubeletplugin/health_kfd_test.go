package kubeletplugin

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/kfd"
	"github.com/gpudra/gpudra/driver/kfdsim"
	"github.com/gpudra/gpudra/kubeletplugin/health"
)

// An AMD GPU whose KFD node disappears is reported lost, once; the others are not.
func TestKFDGPUThatDisappearsIsLost(t *testing.T) {
	p, err := kfdsim.Load("mi300x-8")
	if err != nil {
		t.Fatal(err)
	}
	tree := p.Tree("n")
	res, err := kfd.Discover(tree)
	if err != nil {
		t.Fatal(err)
	}
	inv := &driver.Inventory{}
	inv.AddGPUs(res.GPUs, nil)
	delete(tree, fmt.Sprintf("%s/%d/properties", kfd.TopologyNodes, inv.GPUs[3].KFD.Node))
	var mu sync.Mutex
	var events []health.Event
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	watchKFDHealth(ctx, tree, inv, 5*time.Millisecond, func(ev health.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, ev)
	})
	if len(events) != 1 || events[0].GPU != 3 || !events[0].Lost {
		t.Fatalf("events %+v, want GPU 3 lost, once", events)
	}
	if kind, taint := health.Verdict(events[0]); taint == nil {
		t.Errorf("a lost AMD GPU (%s) is not tainted", kind)
	}
}
