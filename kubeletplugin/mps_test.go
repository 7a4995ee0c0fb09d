package kubeletplugin_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	plugin "github.com/gpudra/gpudra/kubeletplugin"
)

const mpsConfig = "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nsharing: {strategy: MPS, mps: {defaultActiveThreadPercentage: 50, defaultPinnedDeviceMemoryLimit: 20Gi}}"

// gpuClaim is a claim for whole GPU index, with an optional opaque config.
func gpuClaim(index, configYAML string) string {
	s := strings.Replace(wholeGPU, "index == 2", "index == "+index, 1)
	if configYAML != "" {
		s += withConfig("gpu", configYAML)
	}
	return s
}

// mpsMounts are the host directories the claim's CDI spec mounts for MPS.
func mpsMounts(t *testing.T, n *node, c *resourceapi.ResourceClaim) (pipe, log string) {
	t.Helper()
	for _, m := range n.spec(c).Devices[0].ContainerEdits.Mounts {
		switch m.ContainerPath {
		case "/tmp/nvidia-mps":
			pipe = m.HostPath
		case "/var/log/nvidia-mps":
			log = m.HostPath
		}
	}
	if pipe == "" || log == "" {
		t.Fatalf("claim %s has no MPS mounts", c.Name)
	}
	return pipe, log
}

func TestMPSClaimStartsOneDaemonWithItsDevicesAndLimits(t *testing.T) {
	n := newNode(t, "dgx-h100")
	d := n.newDriver(nil)
	c := n.allocate(gpuClaim("2", mpsConfig))
	mustPrepare(t, d, c)
	pipe, log := mpsMounts(t, n, c)
	want := plugin.MPSDaemon{PipeDir: pipe, LogDir: log, Devices: []string{d.Inventory().GPU(2).UUID},
		ActiveThreadPercent: 50, PinnedMemoryMiB: []int64{20 << 10}}
	if len(n.mps.started) != 1 || !reflect.DeepEqual(n.mps.started[0], want) {
		t.Fatalf("daemons started %+v, want exactly %+v", n.mps.started, want)
	}
	mustPrepare(t, d, c) // idempotent: no second daemon
	if len(n.mps.started) != 1 {
		t.Fatalf("a second prepare started another daemon: %+v", n.mps.started)
	}
	if got := n.mps.daemons(); len(got) != 1 {
		t.Fatalf("running daemons %v, want one", got)
	}
	if err := unprepare(t, d, c); err != nil {
		t.Fatal(err)
	}
	if got := n.mps.daemons(); len(got) != 0 || n.mps.stops != 1 {
		t.Errorf("after unprepare: running %v, stops %d; want none running, one stop", got, n.mps.stops)
	}
	if _, err := os.Stat(pipe); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pipe directory %s left after unprepare (%v)", pipe, err)
	}
}

func TestTwoMPSClaimsOnDifferentGPUsGetTwoDaemons(t *testing.T) {
	n := newNode(t, "dgx-h100")
	d := n.newDriver(nil)
	a, b := n.allocate(gpuClaim("2", mpsConfig)), n.allocate(gpuClaim("3", mpsConfig))
	mustPrepare(t, d, a)
	mustPrepare(t, d, b)
	running := n.mps.daemons()
	if len(running) != 2 {
		t.Fatalf("running daemons %v, want two", running)
	}
	for c, gpu := range map[*resourceapi.ResourceClaim]int{a: 2, b: 3} {
		pipe, _ := mpsMounts(t, n, c)
		if got, want := running[pipe].Devices, []string{d.Inventory().GPU(gpu).UUID}; !reflect.DeepEqual(got, want) {
			t.Errorf("claim %s's daemon serves %v, want %v", c.Name, got, want)
		}
	}
	if err := unprepare(t, d, a); err != nil {
		t.Fatal(err)
	}
	pipeB, _ := mpsMounts(t, n, b)
	if got := n.mps.daemons(); len(got) != 1 || got[pipeB].PipeDir == "" {
		t.Errorf("after unpreparing %s: running %v, want only %s's", a.Name, got, b.Name)
	}
}

func TestOnlyClaimsUnderMPSStartADaemon(t *testing.T) {
	tests := []struct {
		name, claim, vgpu string
		want              int
	}{
		{"whole GPU, no config", wholeGPU, "", 0},
		{"whole GPU, time-slicing", gpuClaim("2", "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nsharing: {strategy: TimeSlicing, timeSlicing: {interval: Long}}"), "", 0},
		{"MIG, no config", migClaim, "", 0},
		{"share under HAMi-core", shareClaim("4Gi", "20", ""), "/opt/hami/libvgpu.so", 0},
		{"share under MPS limits", shareClaim("4Gi", "20", ""), "", 1},
		{"whole GPU, MPS", gpuClaim("2", mpsConfig), "", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, "dgx-h100", func(c *plugin.Config) { c.VGPULibrary = tc.vgpu })
			mustPrepare(t, n.newDriver(nil), n.allocate(tc.claim))
			if got := len(n.mps.started); got != tc.want {
				t.Errorf("daemons started %d (%+v), want %d", got, n.mps.started, tc.want)
			}
		})
	}
}

func TestMPSDaemonThatDiedIsRestartedAndUnknownOneIsStopped(t *testing.T) {
	n := newNode(t, "dgx-h100")
	d := n.newDriver(nil)
	c := n.allocate(gpuClaim("2", mpsConfig))
	mustPrepare(t, d, c)
	if len(n.mps.started) != 1 {
		t.Fatalf("daemons started %+v, want one", n.mps.started)
	}
	first := n.mps.started[0]

	n.mps.kill() // the plugin's container restarted, its daemons with it
	d = n.newDriver(nil)
	if running := n.mps.daemons(); len(running) != 1 || !reflect.DeepEqual(running[first.PipeDir], first) {
		t.Fatalf("after restart running %v, want the claim's daemon %+v again", running, first)
	}

	n.mps.kill() // and a prepare of the running claim (a new pod) notices as well
	mustPrepare(t, d, c)
	if len(n.mps.daemons()) != 1 {
		t.Fatalf("prepare of a prepared claim did not restart its dead daemon")
	}

	// Forget the claim behind the plugin's back: its daemon is now unknown.
	if err := os.Remove(filepath.Join(n.cfg.CheckpointDir, plugin.CheckpointFile)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(n.cfg.CDIRoot, "gpudra.dev-gpu_"+string(c.UID)+".json")); err != nil {
		t.Fatal(err)
	}
	n.newDriver(nil)
	if running := n.mps.daemons(); len(running) != 0 {
		t.Errorf("daemon of an unknown claim still runs: %v", running)
	}
	if _, err := os.Stat(first.PipeDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("unknown claim's MPS directory %s left (%v)", first.PipeDir, err)
	}
}

func TestMPSClaimFailsWhenTheDaemonCannotStart(t *testing.T) {
	t.Run("the default binary under the driver root is missing", func(t *testing.T) {
		n := newNode(t, "dgx-h100", func(c *plugin.Config) { c.MPS = nil })
		c := n.allocate(gpuClaim("2", mpsConfig))
		_, err := prepare(t, n.newDriver(nil), c)
		want := filepath.Join(n.cfg.DriverRoot, "usr/bin/nvidia-cuda-mps-control")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("prepare error %v, want one naming %s", err, want)
		}
		if n.spec(c) != nil {
			t.Error("a failed prepare left a CDI spec")
		}
	})
	t.Run("start fails", func(t *testing.T) {
		n := newNode(t, "dgx-h100")
		n.mps.failStart = errors.New("daemon never answered")
		c := n.allocate(gpuClaim("2", mpsConfig))
		if _, err := prepare(t, n.newDriver(nil), c); err == nil || !strings.Contains(err.Error(), "never answered") {
			t.Fatalf("prepare error %v", err)
		}
		assertClean(t, n, c)
	})
}

func TestSimulatedDoublesNeedASimulatedBackend(t *testing.T) {
	for name, mutate := range map[string]func(*plugin.Config){
		"MPS":          func(c *plugin.Config) { c.MPS = plugin.SimulatedMPS{} },
		"time-slicing": func(c *plugin.Config) { c.TimeSlicer = &plugin.SimulatedTimeSlicer{} },
	} {
		t.Run(name, func(t *testing.T) {
			n := newNode(t, "dgx-h100", mutate)
			real := *n.backend
			real.Simulated, real.Name = false, "nvml"
			cfg := n.cfg
			cfg.Backend = &real
			if _, err := plugin.New(t.Context(), cfg); err == nil || !strings.Contains(err.Error(), "simulated") {
				t.Fatalf("New with a real backend and a simulated %s: %v, want an error", name, err)
			}
		})
	}
}

func TestSimulatedMPSDaemonIsAFileInItsPipeDirectory(t *testing.T) {
	n := newNode(t, "dgx-h100", func(c *plugin.Config) { c.MPS = plugin.SimulatedMPS{} })
	d := n.newDriver(nil)
	c := n.allocate(gpuClaim("2", mpsConfig))
	mustPrepare(t, d, c)
	pipe, _ := mpsMounts(t, n, c)
	raw, err := os.ReadFile(filepath.Join(pipe, plugin.SimulatedMPSFile))
	if err != nil || !strings.Contains(string(raw), d.Inventory().GPU(2).UUID) {
		t.Fatalf("simulated daemon file: %q, %v", raw, err)
	}
	if err := unprepare(t, d, c); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(pipe, plugin.SimulatedMPSFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("simulated daemon still there after unprepare (%v)", err)
	}
}
