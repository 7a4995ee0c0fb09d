package nvmlsim_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/gpudra/gpudra/driver/nvmlsim"
)

// running is what NVML reports on GPU i: pid → used memory, and pid → SM utilization.
func running(t *testing.T, lib nvml.Interface, i int) (map[uint32]uint64, map[uint32]uint32) {
	t.Helper()
	dev, ret := lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	procs, ret := dev.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		t.Fatalf("GPU %d: GetComputeRunningProcesses: %v", i, ret)
	}
	mem := map[uint32]uint64{}
	for _, p := range procs {
		mem[p.Pid] = p.UsedGpuMemory
	}
	util := map[uint32]uint32{}
	samples, ret := dev.GetProcessUtilization(0)
	switch ret {
	case nvml.SUCCESS:
		for _, s := range samples {
			util[s.Pid] = s.SmUtil
		}
	case nvml.ERROR_NOT_FOUND:
	default:
		t.Fatalf("GPU %d: GetProcessUtilization: %v", i, ret)
	}
	return mem, util
}

func TestSetProcessesReportsThemThroughNVML(t *testing.T) {
	lib := openDGX(t)
	if err := nvmlsim.SetProcesses(lib, 3, []nvmlsim.Process{{PID: 100, UsedMemoryBytes: 2 << 30, SMUtil: 40}, {PID: 101, UsedMemoryBytes: 1 << 20}}); err != nil {
		t.Fatal(err)
	}
	mem, util := running(t, lib, 3)
	if mem[100] != 2<<30 || mem[101] != 1<<20 || len(mem) != 2 {
		t.Errorf("GPU 3 memory by pid = %v, want 100: 2Gi, 101: 1Mi", mem)
	}
	if util[100] != 40 || util[101] != 0 || len(util) != 2 {
		t.Errorf("GPU 3 SM utilization by pid = %v, want 100: 40, 101: 0", util)
	}
	if mem, util := running(t, lib, 2); len(mem) != 0 || len(util) != 0 {
		t.Errorf("GPU 2 runs %v %v, want nothing", mem, util)
	}
	dev, _ := lib.DeviceGetHandleByIndex(3)
	if _, ret := dev.GetProcessUtilization(uint64(time.Now().Add(time.Hour).UnixMicro())); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("samples newer than the future: %v, want ERROR_NOT_FOUND", ret)
	}
	if err := nvmlsim.SetProcesses(lib, 3, nil); err != nil {
		t.Fatal(err)
	}
	if mem, _ := running(t, lib, 3); len(mem) != 0 {
		t.Errorf("GPU 3 after clearing runs %v", mem)
	}
	if err := nvmlsim.SetProcesses(lib, 8, nil); err == nil {
		t.Error("GPU 8 of an 8-GPU node was accepted")
	}
	if err := nvmlsim.SetProcesses(&mock.Interface{}, 0, nil); err == nil {
		t.Error("a library that is no simulated server was accepted")
	}
}

func TestProcessesFileIsReadWhenItChanges(t *testing.T) {
	lib := openDGX(t)
	path := filepath.Join(t.TempDir(), "processes")
	if err := nvmlsim.SetProcessesFile(lib, path); err != nil {
		t.Fatal(err)
	}
	if mem, _ := running(t, lib, 0); len(mem) != 0 {
		t.Fatalf("without the file GPU 0 runs %v", mem)
	}
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("# lab processes\ngpu=0 pid=7 memory=3Gi sm=55\n\ngpu=1 pid=8 memory=1048576\n")
	mem, util := running(t, lib, 0)
	if mem[7] != 3<<30 || util[7] != 55 || len(mem) != 1 {
		t.Errorf("GPU 0 = %v %v, want pid 7 with 3Gi at 55%%", mem, util)
	}
	if mem, _ := running(t, lib, 1); mem[8] != 1<<20 {
		t.Errorf("GPU 1 = %v, want pid 8 with 1Mi", mem)
	}
	write("gpu=1 pid=9 memory=2Gi sm=10 # only this one now, and a longer line\ngpu=1 pid=x\n")
	if mem, _ := running(t, lib, 0); len(mem) != 0 {
		t.Errorf("GPU 0 after the rewrite runs %v", mem)
	}
	if mem, _ := running(t, lib, 1); len(mem) != 1 || mem[9] != 2<<30 {
		t.Errorf("GPU 1 after the rewrite = %v, want pid 9 only", mem)
	}
	if err := nvmlsim.ProcessesFileError(lib); err == nil || !strings.Contains(err.Error(), `pid="x"`) {
		t.Errorf("error of the bad line = %v", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if mem, _ := running(t, lib, 1); len(mem) != 0 {
		t.Errorf("GPU 1 after the file went runs %v", mem)
	}
}

func TestParseProcess(t *testing.T) {
	gpu, p, err := nvmlsim.ParseProcess("gpu=2 pid=42 memory=512Mi sm=7")
	if err != nil || gpu != 2 || p != (nvmlsim.Process{PID: 42, UsedMemoryBytes: 512 << 20, SMUtil: 7}) {
		t.Errorf("got %d %+v %v", gpu, p, err)
	}
	for _, bad := range []string{"pid=1", "gpu=0", "gpu=0 pid=0", "gpu=0 pid=1 sm=101", "gpu=0 pid=1 memory=lots", "gpu=0 pid=1 color=red"} {
		if _, _, err := nvmlsim.ParseProcess(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}
