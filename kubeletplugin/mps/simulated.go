package mps

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"

	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// SimulatedFile is the file a Simulated daemon is, in its pipe directory.
const SimulatedFile = "gpudra-simulated-mps.json"

// Simulated stands in for MPS control daemons on a simulated node: a "daemon" is a
// file in its pipe directory holding the prepared.MPSDaemon it was started with, so that it
// outlives plugin restarts as a real daemon would and a lab can read what was applied.
// Only for simulated NVML backends: New refuses it with the real NVML.
type Simulated struct{}

var _ Control = Simulated{}

// Start implements Control.
func (Simulated) Start(d prepared.MPSDaemon) (int, error) {
	if err := os.MkdirAll(d.PipeDir, PipeMode); err != nil {
		return 0, err
	}
	raw, err := json.Marshal(d)
	if err != nil {
		return 0, err
	}
	return 0, os.WriteFile(filepath.Join(d.PipeDir, SimulatedFile), raw, 0o600)
}

// Stop implements Control.
func (Simulated) Stop(pipeDir string) error {
	err := os.Remove(filepath.Join(pipeDir, SimulatedFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// Running implements Control.
func (Simulated) Running(pipeDir string) (bool, error) {
	_, err := os.Stat(filepath.Join(pipeDir, SimulatedFile))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}
