// Package proc reads a process's CPU time and peak memory from /proc, for the benchmarks'
// per-process reports.
package proc

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ClockTicks is USER_HZ, the unit of /proc's CPU times (100 on Linux).
const ClockTicks = 100

// file is the text of /proc/<pid>/<name>, empty if the process is gone.
func file(pid int, name string) string {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, name))
	return string(data)
}

// CPUSeconds is a process's user and system CPU time so far (0 if it is gone).
func CPUSeconds(pid int) float64 { return statCPUSeconds(file(pid, "stat")) }

// statCPUSeconds reads utime + stime from the text of /proc/<pid>/stat.
func statCPUSeconds(stat string) float64 {
	// Fields after the ")" that ends the command: state is field 3, utime 14, stime 15.
	f := strings.Fields(stat[strings.LastIndexByte(stat, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	k, _ := strconv.ParseFloat(f[12], 64)
	return (u + k) / ClockTicks
}

// ResetPeak sets a process's VmHWM back to its current resident size (writing 5 to
// clear_refs, Linux 4.0 and later), so that PeakKiB reads the peak from now on.
func ResetPeak(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// PeakKiB is a process's VmHWM (peak resident memory), in KiB (0 if it is gone).
func PeakKiB(pid int) int { return vmHWM(file(pid, "status")) }

// vmHWM reads VmHWM from the text of /proc/<pid>/status.
func vmHWM(status string) int {
	for l := range strings.SplitSeq(status, "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}
