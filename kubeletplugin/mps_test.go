package kubeletplugin_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	resourceapi "k8s.io/api/resource/v1"

	plugin "github.com/gpudra/gpudra/kubeletplugin"
	"github.com/gpudra/gpudra/kubeletplugin/checkpoint"
	"github.com/gpudra/gpudra/kubeletplugin/mps"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
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

// mpsShm is the host directory the claim's CDI spec mounts at /dev/shm.
func mpsShm(t *testing.T, n *node, c *resourceapi.ResourceClaim) string {
	t.Helper()
	var shm []string
	for _, m := range n.spec(c).Devices[0].ContainerEdits.Mounts {
		if m.ContainerPath == "/dev/shm" {
			shm = append(shm, m.HostPath)
		}
	}
	if len(shm) != 1 {
		t.Fatalf("claim %s mounts %v at /dev/shm, want its shm directory once", c.Name, shm)
	}
	return shm[0]
}

// assertMPSDirs checks a prepared claim's MPS directories: every container uid can use
// the pipe directory (0755) and the shm directory (1777, as /dev/shm), and reach them
// through the claim's directory (0711); the shm directory is a tmpfs where the test may
// mount one, else a plain directory (logged: which of the two ran).
func assertMPSDirs(t *testing.T, pipe, log, shm string) {
	t.Helper()
	for dir, want := range map[string]os.FileMode{pipe: 0o755, log: 0o755, shm: os.ModeSticky | 0o777, filepath.Dir(pipe): 0o711} {
		if got := mode(t, dir); got != want {
			t.Errorf("%s has mode %v, want %v", dir, got, want)
		}
	}
	if filepath.Dir(shm) != filepath.Dir(pipe) {
		t.Errorf("shm directory %s is not beside the pipe directory %s", shm, pipe)
	}
	fsType, source, opts, mounted := mountEntry(t, shm)
	if canMountTmpfs() {
		t.Logf("uid %d may mount: checking that %s is a tmpfs", os.Geteuid(), shm)
		if !mounted || fsType != "tmpfs" || source != "gpudra-mps-shm" {
			t.Errorf("shm directory %s: mounted %v, %s from %s; want the plugin's tmpfs", shm, mounted, fsType, source)
		}
		for _, o := range []string{"nosuid", "nodev", "noexec"} {
			if !strings.Contains(","+opts+",", ","+o+",") {
				t.Errorf("shm tmpfs options %s lack %s", opts, o)
			}
		}
	} else {
		t.Logf("uid %d may not mount: checking the fallback, %s a plain directory", os.Geteuid(), shm)
		if mounted {
			t.Errorf("shm directory %s is a %s mount, want a plain directory", shm, fsType)
		}
	}
}

// assertNoMounts checks that no claim's shm tmpfs is mounted at or below dir (the spare
// trees' are the plugin's, ready for the next claims).
func assertNoMounts(t *testing.T, dir string) {
	t.Helper()
	if got, spares := claimMounts(t, dir); len(got) != 0 || len(spares) > maxSpareMounts {
		t.Errorf("mounts left under %s: %v (and %d spare ones, at most %d: %v)", dir, got, len(spares), maxSpareMounts, spares)
	}
}

// maxSpareMounts bounds the spare trees' shm mounts: the tests run two plugin instances on
// one node at once, as a rolling update does, and each keeps its own spares (a plugin's
// start-up removes those on disk, a stop its own).
const maxSpareMounts = 2 * plugin.SpareMPSDirs

// claimMounts splits the mounts at or below dir into the claims' and the spare trees'.
func claimMounts(t testing.TB, dir string) (claims, spares []string) {
	t.Helper()
	for _, m := range mountsUnder(t, dir) {
		if strings.HasPrefix(filepath.Base(filepath.Dir(m)), ".spare-") {
			spares = append(spares, m)
		} else {
			claims = append(claims, m)
		}
	}
	return claims, spares
}

func TestMPSClaimStartsOneDaemonWithItsDevicesAndLimits(t *testing.T) {
	n := newNode(t, "dgx-h100")
	d := n.newDriver(nil)
	c := n.allocate(gpuClaim("2", mpsConfig))
	mustPrepare(t, d, c)
	pipe, log := mpsMounts(t, n, c)
	shm := mpsShm(t, n, c)
	assertMPSDirs(t, pipe, log, shm)
	want := prepared.MPSDaemon{PipeDir: pipe, LogDir: log, ShmDir: shm, Devices: []string{d.Inventory().GPU(2).UUID},
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
	for _, dir := range []string{pipe, shm} {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("directory %s left after unprepare (%v)", dir, err)
		}
	}
	assertNoMounts(t, n.cfg.CheckpointDir)
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
		pipe, log := mpsMounts(t, n, c)
		if got, want := running[pipe].Devices, []string{d.Inventory().GPU(gpu).UUID}; !reflect.DeepEqual(got, want) {
			t.Errorf("claim %s's daemon serves %v, want %v", c.Name, got, want)
		}
		shm := mpsShm(t, n, c)
		if got := running[pipe].ShmDir; got != shm {
			t.Errorf("claim %s's daemon sees %q as /dev/shm, its containers %s", c.Name, got, shm)
		}
		assertMPSDirs(t, pipe, log, shm)
	}
	shmA, shmB := mpsShm(t, n, a), mpsShm(t, n, b)
	if shmA == shmB {
		t.Fatalf("two claims share the shm directory %s", shmA)
	}
	if err := unprepare(t, d, a); err != nil {
		t.Fatal(err)
	}
	pipeB, _ := mpsMounts(t, n, b)
	if got := n.mps.daemons(); len(got) != 1 || got[pipeB].PipeDir == "" {
		t.Errorf("after unpreparing %s: running %v, want only %s's", a.Name, got, b.Name)
	}
	if _, err := os.Stat(shmA); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s's shm directory left after its unprepare (%v)", a.Name, err)
	}
	if got, _ := claimMounts(t, n.cfg.CheckpointDir); canMountTmpfs() && !reflect.DeepEqual(got, []string{shmB}) {
		t.Errorf("mounts after unpreparing %s: %v, want only %s's shm tmpfs %s", a.Name, got, b.Name, shmB)
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
	if err := os.Remove(filepath.Join(n.cfg.CheckpointDir, checkpoint.File)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(n.cfg.CDIRoot, "gpudra.dev-gpu_"+string(c.UID)+".json")); err != nil {
		t.Fatal(err)
	}
	n.newDriver(nil)
	if running := n.mps.daemons(); len(running) != 0 {
		t.Errorf("daemon of an unknown claim still runs: %v", running)
	}
	for _, dir := range []string{first.PipeDir, first.ShmDir} {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("unknown claim's MPS directory %s left (%v)", dir, err)
		}
	}
	assertNoMounts(t, n.cfg.CheckpointDir)
}

// A claim's shm directory that went away (a tmpfs does not outlive the mount namespace
// it was mounted in; someone removed it) is made again, and the daemon, which saw the
// old one, restarted: at a prepare of the prepared claim and at a plugin's start.
func TestMPSShmDirectoryIsMadeAgainWhenMissing(t *testing.T) {
	n := newNode(t, "dgx-h100")
	d := n.newDriver(nil)
	c := n.allocate(gpuClaim("2", mpsConfig))
	mustPrepare(t, d, c)
	pipe, log := mpsMounts(t, n, c)
	shm := mpsShm(t, n, c)
	lose := func() {
		t.Helper()
		unmountUnder(t, shm)
		if err := os.RemoveAll(shm); err != nil {
			t.Fatal(err)
		}
	}

	lose() // the daemon still runs, with the old /dev/shm
	mustPrepare(t, d, c)
	assertMPSDirs(t, pipe, log, shm)
	if len(n.mps.started) != 2 || n.mps.stops != 1 || len(n.mps.daemons()) != 1 {
		t.Errorf("after the shm directory was made again: %d starts, %d stops, running %v; want the daemon restarted once", len(n.mps.started), n.mps.stops, n.mps.daemons())
	}

	lose()
	n.mps.kill() // the plugin's container restarted, its daemons with it
	n.newDriver(nil)
	assertMPSDirs(t, pipe, log, shm)
	if running := n.mps.daemons(); running[pipe].ShmDir != shm {
		t.Errorf("after restart the daemon runs as %+v, want it with the shm directory %s", running[pipe], shm)
	}
}

// Without the privilege to mount, a claim's shm directory is a plain directory of mode
// 1777, which the containers and the daemon still share, and unprepare removes it.
func TestMPSShmDirectoryFallsBackToAPlainDirectory(t *testing.T) {
	n := newNode(t, "dgx-h100")
	d := n.newDriver(nil)
	var tried []string
	plugin.MountShmWith(d, func(dir string) error {
		tried = append(tried, dir)
		return unix.EPERM
	})
	// Spares are made with the plugin's mount function (at start-up, after unprepares).
	if err := plugin.RemakeSpareMPSDirs(d); err != nil {
		t.Fatal(err)
	}
	if len(tried) != plugin.SpareMPSDirs {
		t.Errorf("tmpfs mounts tried for the spare trees: %v, want %d", tried, plugin.SpareMPSDirs)
	}
	tried = nil
	c := n.allocate(gpuClaim("2", mpsConfig))
	mustPrepare(t, d, c)
	shm := mpsShm(t, n, c)
	// The claim took a spare tree whose shm directory is a plain one: the prepare tries
	// once more to mount.
	if len(tried) != 1 || tried[0] != shm {
		t.Errorf("tmpfs mounts tried at prepare %v, want one on %s", tried, shm)
	}
	if got := mode(t, shm); got != os.ModeSticky|0o777 {
		t.Errorf("plain shm directory %s has mode %v, want 1777", shm, got)
	}
	if _, _, _, mounted := mountEntry(t, shm); mounted {
		t.Errorf("%s is a mount point", shm)
	}
	if got := n.mps.daemons()[filepath.Join(filepath.Dir(shm), "pipe")].ShmDir; got != shm {
		t.Errorf("the daemon sees %q as /dev/shm, the containers %s", got, shm)
	}
	if err := unprepare(t, d, c); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(shm); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("plain shm directory %s left after unprepare (%v)", shm, err)
	}
}

// A checkpoint written before claims had a shm directory still loads: its MPS claim
// keeps the pod's /dev/shm (its containers were made so), its daemon is restarted
// without one, and unprepare cleans up.
func TestMPSClaimRecordedWithoutAShmDirectory(t *testing.T) {
	n := newNode(t, "dgx-h100")
	d := n.newDriver(nil)
	plugin.CompactJournalAfterEachRecord(d)
	c := n.allocate(gpuClaim("2", mpsConfig))
	mustPrepare(t, d, c)
	pipe, _ := mpsMounts(t, n, c)
	shm := mpsShm(t, n, c)

	// What the earlier plugin left: its record (without the shm directory), its CDI
	// spec (rewritten from the record below) and MPS directories, no shm directory.
	path := filepath.Join(n.cfg.CheckpointDir, checkpoint.File)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Version, Checksum string
		Data              json.RawMessage
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	old := regexp.MustCompile(`,"(ShmDir|shmDir)":"[^"]*"`).ReplaceAll(f.Data, nil)
	if bytes.Equal(old, f.Data) || bytes.Contains(old, []byte(`"ShmDir"`)) || bytes.Contains(old, []byte(`"shmDir"`)) {
		t.Fatalf("checkpoint data has no shm directory to remove, or kept one:\n%s", old)
	}
	sum := sha256.Sum256(old)
	raw, err = json.Marshal(map[string]any{"version": f.Version, "checksum": hex.EncodeToString(sum[:]), "data": json.RawMessage(old)})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(n.specPath(c.UID)); err != nil {
		t.Fatal(err)
	}
	unmountUnder(t, shm)
	if err := os.RemoveAll(shm); err != nil {
		t.Fatal(err)
	}
	n.mps.kill()

	d = n.newDriver(nil)
	if aside, _ := filepath.Glob(path + ".corrupt-*"); len(aside) != 0 {
		t.Fatalf("the checkpoint without shm directories was set aside as corrupt: %v", aside)
	}
	if claims, _, err := plugin.ReadCheckpoint(n.cfg.CheckpointDir); err != nil || claims[c.UID] != prepared.PrepareCompleted {
		t.Fatalf("claims %v (%v), want %s prepared", claims, err, c.Name)
	}
	running := n.mps.daemons()
	if dm, ok := running[pipe]; !ok || dm.ShmDir != "" {
		t.Errorf("restored daemon %+v (running %v), want it without a shm directory", dm, ok)
	}
	for _, m := range n.spec(c).Devices[0].ContainerEdits.Mounts {
		if m.ContainerPath == "/dev/shm" {
			t.Errorf("the rewritten CDI spec mounts %s at /dev/shm; the claim's containers keep their pod's", m.HostPath)
		}
	}
	if _, err := os.Stat(shm); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a shm directory %s was made for a claim recorded without one (%v)", shm, err)
	}
	if err := unprepare(t, d, c); err != nil {
		t.Fatal(err)
	}
	assertClean(t, n, c)
	assertNoMounts(t, n.cfg.CheckpointDir)
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
		"MPS":          func(c *plugin.Config) { c.MPS = mps.Simulated{} },
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
	n := newNode(t, "dgx-h100", func(c *plugin.Config) { c.MPS = mps.Simulated{} })
	d := n.newDriver(nil)
	c := n.allocate(gpuClaim("2", mpsConfig))
	mustPrepare(t, d, c)
	pipe, _ := mpsMounts(t, n, c)
	raw, err := os.ReadFile(filepath.Join(pipe, mps.SimulatedFile))
	if err != nil || !strings.Contains(string(raw), d.Inventory().GPU(2).UUID) {
		t.Fatalf("simulated daemon file: %q, %v", raw, err)
	}
	if err := unprepare(t, d, c); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(pipe, mps.SimulatedFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("simulated daemon still there after unprepare (%v)", err)
	}
}

// A plugin keeps spare MPS trees with their shm tmpfs mounted, so that a prepare only
// renames one into place; when it stops, it takes its spares (and their mounts) away.
func TestSpareMPSTreesAreReadyAndGoWithThePlugin(t *testing.T) {
	n := newNode(t, "dgx-h100")
	d := n.newDriver(nil)
	spares, _ := filepath.Glob(filepath.Join(n.cfg.CheckpointDir, "mps", ".spare-*"))
	if len(spares) != plugin.SpareMPSDirs {
		t.Fatalf("spare trees %v, want %d", spares, plugin.SpareMPSDirs)
	}
	_, mounted := claimMounts(t, n.cfg.CheckpointDir)
	if canMountTmpfs() {
		t.Logf("uid %d may mount: checking that each spare's shm is a tmpfs already", os.Geteuid())
		if len(mounted) != plugin.SpareMPSDirs {
			t.Errorf("spare shm mounts %v, want one per spare", mounted)
		}
	} else {
		t.Logf("uid %d may not mount: the spares' shm directories are plain ones", os.Geteuid())
		if len(mounted) != 0 {
			t.Errorf("spare shm mounts %v without the privilege to mount", mounted)
		}
	}
	c := n.allocate(gpuClaim("2", mpsConfig))
	mustPrepare(t, d, c)
	shm := mpsShm(t, n, c)
	if _, _, _, isMount := mountEntry(t, shm); isMount != canMountTmpfs() {
		t.Errorf("the claim's shm %s: mount point %v, want %v (the spare's tmpfs moved with its tree)", shm, isMount, canMountTmpfs())
	}
	d.Stop()
	if left, _ := filepath.Glob(filepath.Join(n.cfg.CheckpointDir, "mps", ".spare-*")); len(left) != 0 {
		t.Errorf("spare trees left after the plugin stopped: %v", left)
	}
	if claims, spareMounts := claimMounts(t, n.cfg.CheckpointDir); len(spareMounts) != 0 || (canMountTmpfs() && !slices.Equal(claims, []string{shm})) {
		t.Errorf("after the plugin stopped: claim mounts %v (want the prepared claim's only), spare mounts %v", claims, spareMounts)
	}
}

// An MPS pinned memory limit MPS cannot take (below 1 MiB, or past any GPU's memory and
// int64 bytes) fails the prepare naming the field and the accepted range, instead of
// running the claim without a limit.
func TestMPSPinnedMemoryLimitOutOfRangeFailsThePrepare(t *testing.T) {
	for _, limit := range []string{"512Ki", "1e30"} {
		t.Run(limit, func(t *testing.T) {
			n := newNode(t, "dgx-h100")
			c := n.allocate(gpuClaim("2", "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nsharing: {strategy: MPS, mps: {defaultPinnedDeviceMemoryLimit: "+limit+"}}"))
			_, err := prepare(t, n.newDriver(nil), c)
			if err == nil || !strings.Contains(err.Error(), "sharing.mps.defaultPinnedDeviceMemoryLimit") || !strings.Contains(err.Error(), "from 1Mi to 1Pi") {
				t.Fatalf("prepare error %v, want one naming the field and the accepted range", err)
			}
			assertClean(t, n, c)
		})
	}
}
