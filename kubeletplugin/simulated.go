package kubeletplugin

import (
	"context"
	"sync"

	"k8s.io/klog/v2"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// SimulatedTimeSlicer stands in for nvidia-smi on a simulated node: it remembers and
// logs each GPU's interval. Only for simulated NVML backends.
type SimulatedTimeSlicer struct {
	mu        sync.Mutex
	intervals map[string]api.TimeSliceInterval
}

// SetTimeSlice implements TimeSlicer.
func (s *SimulatedTimeSlicer) SetTimeSlice(_ context.Context, gpuUUID string, interval api.TimeSliceInterval) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.intervals == nil {
		s.intervals = map[string]api.TimeSliceInterval{}
	}
	s.intervals[gpuUUID] = interval
	klog.V(2).InfoS("Simulated GPU time-slice set", "gpu", gpuUUID, "interval", interval)
	return nil
}

// Interval is the interval last set on the GPU ("" when none was).
func (s *SimulatedTimeSlicer) Interval(gpuUUID string) api.TimeSliceInterval {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.intervals[gpuUUID]
}
