package kubeletplugin

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"

	"k8s.io/klog/v2"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// SimulatedMPSFile is the file a SimulatedMPS daemon is, in its pipe directory.
const SimulatedMPSFile = "gpudra-simulated-mps.json"

// SimulatedMPS stands in for MPS control daemons on a simulated node: a "daemon" is a
// file in its pipe directory holding the prepared.MPSDaemon it was started with, so that it
// outlives plugin restarts as a real daemon would and a lab can read what was applied.
// Only for simulated NVML backends: New refuses it with the real NVML.
type SimulatedMPS struct{}

var _ MPSControl = SimulatedMPS{}

// Start implements MPSControl.
func (SimulatedMPS) Start(d prepared.MPSDaemon) (int, error) {
	if err := os.MkdirAll(d.PipeDir, mpsPipeMode); err != nil {
		return 0, err
	}
	raw, err := json.Marshal(d)
	if err != nil {
		return 0, err
	}
	return 0, os.WriteFile(filepath.Join(d.PipeDir, SimulatedMPSFile), raw, 0o600)
}

// Stop implements MPSControl.
func (SimulatedMPS) Stop(pipeDir string) error {
	err := os.Remove(filepath.Join(pipeDir, SimulatedMPSFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// Running implements MPSControl.
func (SimulatedMPS) Running(pipeDir string) (bool, error) {
	_, err := os.Stat(filepath.Join(pipeDir, SimulatedMPSFile))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

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
