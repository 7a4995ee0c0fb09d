package proc

import (
	"os"
	"testing"
)

func TestVmHWM(t *testing.T) {
	if got := vmHWM("Name:\tx\nVmPeak:\t  900 kB\nVmHWM:\t  123456 kB\nVmRSS:\t 1 kB\n"); got != 123456 {
		t.Errorf("VmHWM %d, want 123456", got)
	}
}

// A command name may hold spaces and parentheses; the times are counted after its last ")".
func TestStatCPUSeconds(t *testing.T) {
	stat := "4242 (kube (sched) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0 300 0 0"
	if got := statCPUSeconds(stat); got != 3 {
		t.Errorf("CPU seconds %v, want 3 (250 + 50 ticks)", got)
	}
	if got := statCPUSeconds("1 (x) S"); got != 0 {
		t.Errorf("a short stat line gave %v, want 0", got)
	}
}

func TestThisProcess(t *testing.T) {
	if PeakKiB(os.Getpid()) <= 0 {
		t.Error("this process has no peak memory")
	}
	if err := ResetPeak(os.Getpid()); err != nil {
		t.Skipf("clear_refs not writable here: %v", err)
	}
	if PeakKiB(os.Getpid()) <= 0 {
		t.Error("no peak memory after a reset")
	}
	if CPUSeconds(-1) != 0 || PeakKiB(-1) != 0 {
		t.Error("a process that does not exist should read 0")
	}
}
