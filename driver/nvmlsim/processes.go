package nvmlsim

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
	"weak"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Process is a compute process that a simulated GPU reports as running on it: NVML's
// GetComputeRunningProcesses lists its PID and memory, GetProcessUtilization its SM
// utilization.
type Process struct {
	PID             uint32
	UsedMemoryBytes uint64
	// SMUtil is the percent of the GPU's SMs the process kept busy over the last sample.
	SMUtil uint32
}

// processTable is one simulated server's processes, per GPU index. It holds no
// reference to the server, so a server nobody uses any more goes away with it.
type processTable struct {
	mu    sync.Mutex
	byGPU map[int][]Process
	// file, when set, is read again whenever its modification time or size changes;
	// its lines replace every GPU's processes.
	file     string
	fileMod  time.Time
	fileSize int64
	fileErr  error
}

// processTables finds a simulated server's process table from the server.
var processTables sync.Map // weak.Pointer[server.Server] → *processTable

func tableOf(lib nvml.Interface) (*processTable, error) {
	s, ok := lib.(*server.Server)
	if ok {
		if t, found := processTables.Load(weak.Make(s)); found {
			return t.(*processTable), nil
		}
	}
	return nil, fmt.Errorf("simulated processes need a simulated NVML server from nvmlsim, not %T", lib)
}

// SetProcesses makes GPU gpu of a simulated server report procs as its compute
// processes, replacing those it reported (nil: none).
func SetProcesses(lib nvml.Interface, gpu int, procs []Process) error {
	t, err := tableOf(lib)
	if err != nil {
		return err
	}
	if n := len(lib.(*server.Server).Devices); gpu < 0 || gpu >= n {
		return fmt.Errorf("GPU %d: the simulated node has GPUs 0 to %d", gpu, n-1)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.byGPU[gpu] = append([]Process(nil), procs...)
	return nil
}

// SetProcessesFile makes a simulated server take its processes from path, as labs
// write it: one process a line, "gpu=<index> pid=<pid> memory=<bytes, or a quantity
// such as 2Gi> sm=<percent>" (see ParseProcess); blank lines and # comments are
// skipped. The server reads the file again whenever it changes; a file that does not
// exist means no processes, and one that cannot be read keeps the processes it last
// read (the error is returned by ProcessesFileError). "" stops reading a file.
func SetProcessesFile(lib nvml.Interface, path string) error {
	t, err := tableOf(lib)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.file, t.fileMod, t.fileSize, t.fileErr = path, time.Time{}, -1, nil
	return nil
}

// ProcessesFileError is why the server's processes file (SetProcessesFile) could not
// be read the last time it changed; nil when it could.
func ProcessesFileError(lib nvml.Interface) error {
	t, err := tableOf(lib)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.fileErr
}

// ParseProcess reads one line of a processes file: "gpu=0 pid=4242 memory=2Gi sm=35".
// memory and sm may be left out (0).
func ParseProcess(line string) (gpu int, p Process, err error) {
	gpu = -1
	const want = "write gpu=<index> pid=<pid> and optionally memory=<bytes or quantity> sm=<percent>"
	for _, word := range strings.Fields(line) {
		key, value, _ := strings.Cut(word, "=")
		switch key {
		case "gpu":
			if gpu, err = strconv.Atoi(value); err != nil || gpu < 0 {
				return 0, Process{}, fmt.Errorf("%q: gpu=%q is not a GPU index", line, value)
			}
		case "pid":
			pid, err := strconv.ParseUint(value, 10, 32)
			if err != nil || pid == 0 {
				return 0, Process{}, fmt.Errorf("%q: pid=%q is not a process id", line, value)
			}
			p.PID = uint32(pid)
		case "memory":
			q, err := resource.ParseQuantity(value)
			if err != nil || q.Sign() < 0 {
				return 0, Process{}, fmt.Errorf("%q: memory=%q is not a number of bytes", line, value)
			}
			p.UsedMemoryBytes = uint64(q.Value())
		case "sm":
			sm, err := strconv.ParseUint(value, 10, 32)
			if err != nil || sm > 100 {
				return 0, Process{}, fmt.Errorf("%q: sm=%q is not a percent 0..100", line, value)
			}
			p.SMUtil = uint32(sm)
		default:
			return 0, Process{}, fmt.Errorf("%q: unexpected %q; %s", line, word, want)
		}
	}
	if gpu < 0 || p.PID == 0 {
		return 0, Process{}, fmt.Errorf("%q: %s", line, want)
	}
	return gpu, p, nil
}

// parseProcesses reads a processes file's lines.
func parseProcesses(data []byte, gpus int) (map[int][]Process, error) {
	out := map[int][]Process{}
	var errs []error
	lines := bufio.NewScanner(bytes.NewReader(data))
	for lines.Scan() {
		line, _, _ := strings.Cut(lines.Text(), "#")
		if strings.TrimSpace(line) == "" {
			continue
		}
		gpu, p, err := ParseProcess(line)
		if err == nil && gpu >= gpus {
			err = fmt.Errorf("%q: GPU %d: the simulated node has GPUs 0 to %d", line, gpu, gpus-1)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[gpu] = append(out[gpu], p)
	}
	return out, errors.Join(errs...)
}

// processes are GPU i's processes, after reading the file when it changed.
func (t *processTable) processes(i, gpus int) []Process {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.file != "" {
		st, err := os.Stat(t.file)
		switch {
		case errors.Is(err, os.ErrNotExist):
			t.byGPU, t.fileMod, t.fileSize, t.fileErr = map[int][]Process{}, time.Time{}, -1, nil
		case err != nil:
			t.fileErr = err
		case !st.ModTime().Equal(t.fileMod) || st.Size() != t.fileSize:
			data, err := os.ReadFile(t.file)
			if err == nil {
				var byGPU map[int][]Process
				byGPU, err = parseProcesses(data, gpus)
				t.byGPU = byGPU // the lines that parse
			}
			t.fileMod, t.fileSize, t.fileErr = st.ModTime(), st.Size(), err
		}
	}
	return append([]Process(nil), t.byGPU[i]...)
}

// wireProcesses gives a simulated server's GPUs NVML's per-process calls:
// GetComputeRunningProcesses and GetProcessUtilization (samples newer than the
// timestamp asked for; ERROR_NOT_FOUND when there are none, as NVML answers), with
// their library-level forms.
func wireProcesses(s *server.Server, devices []*server.Device) {
	t := &processTable{byGPU: map[int][]Process{}}
	key := weak.Make(s)
	processTables.Store(key, t)
	runtime.AddCleanup(s, func(k weak.Pointer[server.Server]) { processTables.Delete(k) }, key)
	gpus := len(devices)
	s.DeviceGetComputeRunningProcessesFunc = func(d nvml.Device) ([]nvml.ProcessInfo, nvml.Return) {
		return d.GetComputeRunningProcesses()
	}
	s.DeviceGetProcessUtilizationFunc = func(d nvml.Device, last uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		return d.GetProcessUtilization(last)
	}
	for i, d := range devices {
		d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
			procs := t.processes(i, gpus)
			out := make([]nvml.ProcessInfo, len(procs))
			for k, p := range procs {
				out[k] = nvml.ProcessInfo{Pid: p.PID, UsedGpuMemory: p.UsedMemoryBytes}
			}
			return out, nvml.SUCCESS
		}
		d.GetProcessUtilizationFunc = func(last uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
			now := uint64(time.Now().UnixMicro())
			if last >= now {
				return nil, nvml.ERROR_NOT_FOUND
			}
			var out []nvml.ProcessUtilizationSample
			for _, p := range t.processes(i, gpus) {
				out = append(out, nvml.ProcessUtilizationSample{Pid: p.PID, TimeStamp: now, SmUtil: p.SMUtil})
			}
			if len(out) == 0 {
				return nil, nvml.ERROR_NOT_FOUND
			}
			return out, nvml.SUCCESS
		}
	}
}
