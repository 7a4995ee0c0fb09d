package kubeletplugin

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/nvmlsim"
	"github.com/gpudra/gpudra/kubeletplugin/health"
	"github.com/gpudra/gpudra/kubeletplugin/internal/loop"
)

// watchNVMLHealth registers for the health events of every GPU and returns a function
// that waits for them, up to timeout at a time, until ctx ends, beating loops each time round. GPUs that cannot
// report events are logged and left out; it fails when none can.
func watchNVMLHealth(lib nvml.Interface, inv *driver.Inventory, timeout time.Duration, logger klog.Logger, l *loops) (func(ctx context.Context, handle func(health.Event)), error) {
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML EventSetCreate: %v", ret)
	}
	gpus := map[nvml.Device]int{}
	for _, g := range inv.GPUs {
		if !g.IsNVIDIA() {
			continue // AMD GPUs: watchKFDHealth
		}
		dev, ret := lib.DeviceGetHandleByUUID(g.UUID)
		if ret != nvml.SUCCESS {
			logger.Error(nil, "GPU health is not watched: no NVML handle", "gpu", g.Index, "uuid", g.UUID, "nvml", ret.Error())
			continue
		}
		types := health.EventTypes
		if supported, ret := dev.GetSupportedEventTypes(); ret == nvml.SUCCESS {
			types &= supported
		}
		if ret := dev.RegisterEvents(types, set); ret != nvml.SUCCESS {
			logger.Error(nil, "GPU health is not watched: registering for NVML events failed", "gpu", g.Index, "events", fmt.Sprintf("%#x", types), "nvml", ret.Error())
			continue
		}
		gpus[dev] = g.Index
	}
	if len(gpus) == 0 {
		set.Free()
		return nil, errors.New("no GPU can report NVML health events")
	}
	indices := slices.Sorted(maps.Values(gpus))
	return func(ctx context.Context, handle func(health.Event)) {
		const loop = "nvml-events"
		defer l.done(loop)
		defer set.Free()
		for ctx.Err() == nil {
			l.beat(loop)
			ev, ret := set.Wait(uint32(max(timeout.Milliseconds(), 1)))
			switch ret {
			case nvml.SUCCESS:
				gpu, ok := gpus[ev.Device]
				if !ok {
					logger.Info("NVML event from an unknown device, ignored", "event", fmt.Sprintf("%#x", ev.EventType), "data", ev.EventData)
					continue
				}
				handle(health.Event{GPU: gpu, Type: ev.EventType, XID: ev.EventData, At: time.Now()})
			case nvml.ERROR_TIMEOUT:
			case nvml.ERROR_GPU_IS_LOST:
				at := time.Now()
				for _, gpu := range lostGPUs(gpus, indices) {
					handle(health.Event{GPU: gpu, Lost: true, At: at})
				}
				sleep(ctx, time.Second)
			default:
				logger.Error(nil, "Waiting for NVML events failed", "nvml", ret.Error())
				sleep(ctx, time.Second)
			}
		}
	}, nil
}

// lostGPUs are the GPUs an event set's "GPU is lost" is about. NVML does not say which:
// the GPUs that NVML cannot read any more, or when it still reads them all, all of them
// (as NVIDIA's device plugin does).
func lostGPUs(gpus map[nvml.Device]int, all []int) []int {
	var lost []int
	for dev, gpu := range gpus {
		if _, ret := dev.GetMemoryInfo(); ret == nvml.ERROR_GPU_IS_LOST {
			lost = append(lost, gpu)
		}
	}
	if len(lost) == 0 {
		return all
	}
	slices.Sort(lost)
	return lost
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// injectionPoll is how often the injection file is looked for.
const injectionPoll = 500 * time.Millisecond

// watchInjections lets a lab raise GPU events on a simulated backend from outside the
// process: it appends lines such as "gpu=3 xid=79" (see nvmlsim.ParseEvent) to path;
// the plugin takes the file (renames it, so lines appended meanwhile start a new one),
// injects each line's event and removes it. Blank lines and # comments are skipped.
func watchInjections(ctx context.Context, lib nvml.Interface, path string, l *loops) {
	const name = "health-injection"
	logger := klog.FromContext(ctx).WithValues("file", path)
	taken := path + ".taken"
	defer l.done(name)
	l.beat(name)
	loop.After(ctx, injectionPoll, func(context.Context) bool {
		defer l.beat(name)
		if err := os.Rename(path, taken); err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				logger.Error(err, "Taking the health injection file failed")
			}
			return false
		}
		data, err := os.ReadFile(taken)
		_ = os.Remove(taken)
		if err != nil {
			logger.Error(err, "Reading the health injection file failed")
			return false
		}
		lines := bufio.NewScanner(bytes.NewReader(data))
		for lines.Scan() {
			line := lines.Text()
			line, _, _ = strings.Cut(line, "#")
			if strings.TrimSpace(line) == "" {
				continue
			}
			gpu, ev, err := nvmlsim.ParseEvent(line)
			if err == nil {
				_, err = nvmlsim.Inject(lib, gpu, ev)
			}
			if err != nil {
				logger.Error(err, "Injecting a simulated GPU event failed", "line", line)
				continue
			}
			logger.Info("Injected a simulated GPU event", "gpu", gpu, "event", fmt.Sprintf("%#x", ev.Type), "data", ev.Data)
		}
		return false
	})
}
