package kubeletplugin_test

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	plugin "github.com/gpudra/gpudra/kubeletplugin"
	"github.com/gpudra/gpudra/kubeletplugin/checkpoint"
)

type crash struct{ point string }

// crashAt is a hook that kills the plugin (a panic the test catches) the first time
// it reaches point.
func crashAt(point string, reached *bool) plugin.Hook {
	return func(p string) error {
		if p == point && !*reached {
			*reached = true
			panic(crash{p})
		}
		return nil
	}
}

// run calls f and reports whether it crashed.
func run(t *testing.T, f func()) (crashed bool) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(crash); !ok {
				panic(r)
			}
			crashed = true
		}
	}()
	f()
	return false
}

// assertClean checks that the node holds nothing for the claim: no MIG instance, CDI
// spec, MPS control daemon or shm mount, and every GPU at its default time-slice.
func assertClean(t *testing.T, n *node, c *resourceapi.ResourceClaim) {
	t.Helper()
	if got := n.migInstances(); len(got) != 0 {
		t.Errorf("leaked MIG instances %v", got)
	}
	if n.spec(c) != nil {
		t.Error("leaked CDI spec")
	}
	if got := n.daemons(t); len(got) != 0 {
		t.Errorf("leaked MPS control daemons %v", got)
	}
	if got, spares := claimMounts(t, n.cfg.CheckpointDir); len(got) != 0 || len(spares) > maxSpareMounts {
		t.Errorf("leaked MPS shm mounts %v (and %d spare ones, at most %d: %v)", got, len(spares), maxSpareMounts, spares)
	}
	if got := hamiFiles(t, n); len(got) != 0 {
		t.Errorf("leaked HAMi-core files %v", got)
	}
	for gpu, iv := range n.timeSlices.intervals {
		if iv != api.IntervalDefault {
			t.Errorf("GPU %s left at time-slice %s", gpu, iv)
		}
	}
}

// assertSharing checks the claim's MPS control daemons and GPU 2's time-slice.
func assertSharing(t *testing.T, n *node, daemons int, slice api.TimeSliceInterval) {
	t.Helper()
	if got := n.daemons(t); len(got) != daemons {
		t.Errorf("MPS control daemons %v, want %d", got, daemons)
	}
	uuid := n.backendGPU(2)
	if got := n.timeSlices.interval(uuid); got != slice {
		t.Errorf("GPU 2 time-slice %s, want %s", got, slice)
	}
}

// assertPrepared checks that the claim is prepared exactly once.
func assertPrepared(t *testing.T, n *node, c *resourceapi.ResourceClaim, mig bool) {
	t.Helper()
	if n.spec(c) == nil {
		t.Error("prepared claim has no CDI spec")
	}
	want := 0
	if mig {
		want = 1
	}
	if got := n.migInstances(); len(got) != want {
		t.Errorf("MIG instances %v, want %d", got, want)
	}
}

// crashClaims are the claim kinds the crash tests prepare and unprepare.
var crashClaims = []struct {
	name, spec string
	mig        bool
	mps        int // MPS control daemons while prepared
	slice      api.TimeSliceInterval
	pods       bool // MPS control daemons in pods (mps.Pods)
	hami       bool // the node has HAMi-core's libvgpu.so
}{
	{"mig", migClaim, true, 0, api.IntervalDefault, false, false},
	{"share", shareClaim("4Gi", "20", ""), false, 1, api.IntervalDefault, false, false},
	{"whole", wholeGPU, false, 0, api.IntervalDefault, false, false},
	{"mps", gpuClaim("2", mpsConfig), false, 1, api.IntervalDefault, false, false},
	{"timeslice", gpuClaim("2", "apiVersion: gpu.gpudra.dev/v1alpha1\nkind: GpuConfig\nsharing: {timeSlicing: {interval: Long}}"), false, 0, api.IntervalLong, false, false},
	{"mps-pod", gpuClaim("2", mpsConfig), false, 1, api.IntervalDefault, true, false},
	{"hami-share", shareClaim("4Gi", "20", ""), false, 0, api.IntervalDefault, false, true},
}

// crashNode is a node for the crash tests: its MPS control daemons in pods or not, with
// HAMi-core or not.
func crashNode(t *testing.T, pods, hami bool) *node {
	if pods {
		return newMPSPodsNode(t)
	}
	if hami {
		return newNode(t, "dgx-h100", func(c *plugin.Config) { c.VGPULibrary = "/opt/hami/libvgpu.so" })
	}
	return newNode(t, "dgx-h100")
}

func TestRestartAfterCrashAtEachStepEndsClean(t *testing.T) {
	exercised := 0
	for _, cl := range crashClaims {
		for _, point := range plugin.PreparePoints {
			t.Run("prepare/"+cl.name+"/"+point, func(t *testing.T) {
				n := crashNode(t, cl.pods, cl.hami)
				c := n.allocate(cl.spec)
				var reached bool
				crashed := run(t, func() { _, _ = prepare(t, n.newDriver(crashAt(point, &reached)), c) })
				if !crashed {
					return // this claim never reaches the point
				}
				exercised++
				d := n.newDriver(nil)
				if point == plugin.PointPrepareCompleted {
					assertPrepared(t, n, c, cl.mig)
					assertSharing(t, n, cl.mps, cl.slice)
				} else {
					assertClean(t, n, c)
				}
				// The kubelet retries the prepare, later unprepares.
				first := mustPrepare(t, d, c)
				assertPrepared(t, n, c, cl.mig)
				assertSharing(t, n, cl.mps, cl.slice)
				if again := mustPrepare(t, n.newDriver(nil), c); !reflect.DeepEqual(first, again) {
					t.Errorf("prepare after restart %+v, want %+v", again, first)
				}
				if err := unprepare(t, d, c); err != nil {
					t.Fatal(err)
				}
				assertClean(t, n, c)
			})
		}
		for _, point := range plugin.UnpreparePoints {
			t.Run("unprepare/"+cl.name+"/"+point, func(t *testing.T) {
				n := crashNode(t, cl.pods, cl.hami)
				c := n.allocate(cl.spec)
				var reached bool
				d := n.newDriver(crashAt(point, &reached))
				mustPrepare(t, d, c)
				assertSharing(t, n, cl.mps, cl.slice)
				if !run(t, func() { _ = unprepare(t, d, c) }) {
					if cl.slice == api.IntervalDefault && slices.Contains(plugin.TimeSlicePoints, point) {
						return // no time-slice to give back
					}
					t.Fatalf("unprepare never reached %s", point)
				}
				exercised++
				d = n.newDriver(nil)
				if point == plugin.PointUnprepareStartedTorn {
					// The UnprepareStarted record never made it: still prepared, once.
					assertPrepared(t, n, c, cl.mig)
					assertSharing(t, n, cl.mps, cl.slice)
				} else {
					assertClean(t, n, c)
				}
				if err := unprepare(t, d, c); err != nil {
					t.Fatalf("retried unprepare: %v", err)
				}
				assertClean(t, n, c)
			})
		}
	}
	t.Logf("crash injection points exercised: %d", exercised)
	if exercised < len(plugin.PreparePoints)+len(plugin.UnpreparePoints) {
		t.Errorf("only %d crash points exercised", exercised)
	}
}

func TestCorruptCheckpointIsSetAsideAndRebuilt(t *testing.T) {
	for _, corruption := range []struct {
		name  string
		apply func(path string) error
	}{
		{"garbage", func(p string) error { return os.WriteFile(p, []byte("\x00\x01not json"), 0o600) }},
		{"truncated", func(p string) error {
			raw, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(p, raw[:len(raw)/2], 0o600)
		}},
		{"checksum mismatch", func(p string) error {
			raw, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for k := len(raw) - 1; k > 0; k-- {
				if raw[k] == 'b' { // flip one byte inside the data
					raw[k] = 'c'
					break
				}
			}
			return os.WriteFile(p, raw, 0o600)
		}},
	} {
		t.Run(corruption.name, func(t *testing.T) {
			n, mig, whole, wantMIG := preparedMIGAndWhole(t)
			path := filepath.Join(n.cfg.CheckpointDir, checkpoint.File)
			if err := corruption.apply(path); err != nil {
				t.Fatal(err)
			}
			recoversFromCorruption(t, n, "checkpoint", path, mig, wantMIG, whole)
		})
	}
}

// preparedMIGAndWhole is a node whose plugin prepared a MIG and a whole-GPU claim, and
// what the MIG claim prepared as.
func preparedMIGAndWhole(t *testing.T) (n *node, mig, whole *resourceapi.ResourceClaim, wantMIG []kubeletplugin.Device) {
	t.Helper()
	n = newNode(t, "dgx-h100")
	d := n.newDriver(nil)
	mig, whole = n.allocate(migClaim), n.allocate(wholeGPU)
	wantMIG = mustPrepare(t, d, mig)
	mustPrepare(t, d, whole)
	return n, mig, whole, wantMIG
}

// recoversFromCorruption starts a plugin over a corrupted file (the checkpoint or its
// journal, at path): it must start (no crash loop), set the file aside, prepare the MIG
// claim it rebuilt from the CDI specs as before, and clean up both claims.
func recoversFromCorruption(t *testing.T, n *node, what, path string, mig *resourceapi.ResourceClaim, wantMIG []kubeletplugin.Device, whole *resourceapi.ResourceClaim) {
	t.Helper()
	d := n.newDriver(nil)
	if aside, _ := filepath.Glob(path + ".corrupt-*"); len(aside) != 1 {
		t.Errorf("corrupt %s set aside as %v, want one file", what, aside)
	}
	if got := mustPrepare(t, d, mig); !reflect.DeepEqual(got, wantMIG) {
		t.Errorf("rebuilt claim prepares as %+v, want %+v", got, wantMIG)
	}
	for _, c := range []*resourceapi.ResourceClaim{mig, whole} {
		if err := unprepare(t, d, c); err != nil {
			t.Fatal(err)
		}
		assertClean(t, n, c)
	}
}

func TestRebootDropsClaimsOfTheOldBoot(t *testing.T) {
	n := newNode(t, "dgx-h100")
	d := n.newDriver(nil)
	c := n.allocate(migClaim)
	mustPrepare(t, d, c)
	if err := os.WriteFile(n.cfg.BootIDPath, []byte("boot-2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d = n.newDriver(nil)
	assertClean(t, n, c)
	mustPrepare(t, d, c) // the kubelet prepares again after the reboot
	assertPrepared(t, n, c, true)
}

func TestStartupDestroysMIGInstancesNoClaimAccountsFor(t *testing.T) {
	n := newNode(t, "dgx-h100")
	d := n.newDriver(nil)
	c := n.allocate(migClaim)
	mustPrepare(t, d, c)
	// Forget the claim behind the plugin's back: its instance is now unknown.
	if err := os.Remove(filepath.Join(n.cfg.CheckpointDir, checkpoint.File)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(n.cfg.CDIRoot, "gpudra.dev-gpu_"+string(c.UID)+".json")); err != nil {
		t.Fatal(err)
	}
	n.newDriver(nil)
	assertClean(t, n, c)
}

func TestLostSimulatedInstanceIsRecreatedForAPreparedClaim(t *testing.T) {
	n := newNode(t, "dgx-h100")
	d := n.newDriver(nil)
	c := n.allocate(migClaim)
	mustPrepare(t, d, c)
	// A simulated GPU does not outlive the plugin process: destroy the instance.
	p := n.allocatedPlacement(c)
	dev, _ := n.backend.NVML.DeviceGetHandleByIndex(p.gpu)
	_ = dev
	for _, gi := range giHandles(t, n, p.gpu) {
		gi.Destroy()
	}
	n.newDriver(nil)
	assertPrepared(t, n, c, true)
	if got := n.migInstances(); !reflect.DeepEqual(got, []placement{p}) {
		t.Errorf("instances %v, want %v", got, p)
	}
}
