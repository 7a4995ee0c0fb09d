package kubeletplugin_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/driver/nvmlsim"
	plugin "github.com/gpudra/gpudra/kubeletplugin"
)

// withDriverFiles gives the node's driver root what a lab's real node has: NVIDIA's
// character devices (as the lab makes them) and the simulated profile's driver files
// (nvmlsim.WriteDriverFiles). It returns the driver version. Making device files needs
// CAP_MKNOD; without it the test is skipped.
func withDriverFiles(t *testing.T, root, profile string) string {
	t.Helper()
	dev := filepath.Join(root, "dev")
	if err := os.MkdirAll(filepath.Join(dev, "nvidia-caps"), 0o755); err != nil {
		t.Fatal(err)
	}
	mk := func(name string, major, minor uint32) {
		err := unix.Mknod(filepath.Join(dev, name), unix.S_IFCHR|0o666, int(unix.Mkdev(major, minor)))
		if errors.Is(err, unix.EPERM) {
			t.Skipf("making device files needs CAP_MKNOD: %v", err)
		}
		if err != nil && !errors.Is(err, os.ErrExist) {
			t.Fatal(err)
		}
	}
	for i := range 8 {
		mk("nvidia"+strconv.Itoa(i), 195, uint32(i))
	}
	mk("nvidiactl", 195, 255)
	mk("nvidia-uvm", 235, 0)
	mk("nvidia-uvm-tools", 235, 1)
	version, err := nvmlsim.WriteDriverFiles(root, profile)
	if err != nil {
		t.Fatal(err)
	}
	return version
}

// hookVerbs are the nvidia-cdi-hook subcommands of hooks.
func hookVerbs(hooks []*cdispec.Hook) []string {
	var out []string
	for _, h := range hooks {
		if len(h.Args) > 1 {
			out = append(out, h.Args[1])
		}
	}
	return out
}

func mountedAt(mounts []*cdispec.Mount) map[string]string {
	out := map[string]string{}
	for _, m := range mounts {
		out[m.ContainerPath] = m.HostPath
	}
	return out
}

func TestSpecsCarryNvcdiDriverFilesDeviceNodesAndHooks(t *testing.T) {
	const hook = "/opt/nvidia/nvidia-cdi-hook"
	claims := []struct {
		name, spec string
		// nodes are the device's nodes; MIG devices' come from gpudra (go-nvml's mock
		// servers have no MIG device handles for nvcdi).
		nodes func(d *plugin.Driver, c *resourceapi.ResourceClaim, n *node) []string
		mps   bool
	}{
		{"whole GPU", wholeGPU, func(*plugin.Driver, *resourceapi.ResourceClaim, *node) []string { return []string{"/dev/nvidia2"} }, false},
		{"MIG device", migClaim, func(_ *plugin.Driver, c *resourceapi.ResourceClaim, n *node) []string {
			return []string{"/dev/nvidia" + itoa(n.allocatedPlacement(c).gpu)}
		}, false},
		{"share under MPS", shareClaim("10Gi", "25", ""), func(d *plugin.Driver, c *resourceapi.ResourceClaim, _ *node) []string {
			return []string{"/dev/nvidia" + strings.TrimSuffix(strings.TrimPrefix(c.Status.Allocation.Devices.Results[0].Device, "gpu-"), "-share")}
		}, true},
	}
	for _, hooks := range []bool{true, false} {
		for _, tc := range claims {
			t.Run(fmt.Sprintf("%s, hooks %v", tc.name, hooks), func(t *testing.T) {
				n := newNode(t, "dgx-h100", func(c *plugin.Config) {
					if hooks {
						c.CDIHookPath = hook
					}
				})
				root := n.cfg.DriverRoot
				version := withDriverFiles(t, root, "dgx-h100")
				d := n.newDriver(nil)
				c := n.allocate(tc.spec)
				devs := mustPrepare(t, d, c)
				spec := n.spec(c)

				// The spec-wide part: nvcdi's control nodes, driver libraries and binaries.
				libs := "/" + nvmlsim.LibDir() + "/"
				mounts := mountedAt(spec.ContainerEdits.Mounts)
				for _, p := range []string{libs + "libcuda.so." + version, libs + "libnvidia-ml.so." + version, "/usr/bin/nvidia-smi"} {
					if mounts[p] != filepath.Join(root, p) {
						t.Errorf("spec mounts %s from %q, want it from the driver root", p, mounts[p])
					}
				}
				if _, ok := mounts[cdi.MPSPipeDir]; ok {
					t.Errorf("spec mounts the node-wide MPS pipe directory")
				}
				if got := hostPaths(spec.ContainerEdits.DeviceNodes); !slices.Contains(got, filepath.Join(root, "dev/nvidiactl")) {
					t.Errorf("spec device nodes %v lack nvidiactl", got)
				}

				// The device: its own nodes, gpudra's environment, MPS mounts when shared.
				e := spec.Devices[0].ContainerEdits
				var paths []string
				for _, dn := range e.DeviceNodes {
					paths = append(paths, dn.Path)
					if dn.HostPath != filepath.Join(root, dn.Path) {
						t.Errorf("device node %s from %s, not the driver root", dn.Path, dn.HostPath)
					}
				}
				if want := tc.nodes(d, c, n); !slices.Equal(paths[:len(want)], want) {
					t.Errorf("device nodes %v, want %v first", paths, want)
				}
				if env(e)["GPUDRA_VISIBLE_DEVICES"] == "" || env(e)["GPUDRA_DEVICES"] == "" {
					t.Errorf("device env %v lacks gpudra's variables", e.Env)
				}
				// The container, from a CUDA image (NVIDIA_VISIBLE_DEVICES=all), tells NVIDIA's
				// runtime to inject nothing more, and the workload which GPUs it has.
				ctr := containerEnv(t, n, devs...)
				if got := ctr["NVIDIA_VISIBLE_DEVICES"]; got != "void" {
					t.Errorf("the container's NVIDIA_VISIBLE_DEVICES=%q: NVIDIA's runtime would inject those devices again; want void", got)
				}
				if got, want := ctr["GPUDRA_VISIBLE_DEVICES"], env(e)["GPUDRA_VISIBLE_DEVICES"]; got != want {
					t.Errorf("the container's GPUDRA_VISIBLE_DEVICES=%q, want the device's %q", got, want)
				}
				if _, ok := mountedAt(e.Mounts)[cdi.MPSPipeDir]; ok != tc.mps {
					t.Errorf("device mounts the claim's MPS pipe directory: %v, want %v", ok, tc.mps)
				}

				verbs := hookVerbs(spec.ContainerEdits.Hooks)
				if !hooks {
					if all := append(verbs, hookVerbs(e.Hooks)...); len(all) > 0 {
						t.Errorf("hooks %v written with hooks off", all)
					}
					return
				}
				for _, v := range []string{"update-ldcache", "create-symlinks"} {
					if !slices.Contains(verbs, v) {
						t.Errorf("spec hooks %v lack %s", verbs, v)
					}
				}
				for _, h := range spec.ContainerEdits.Hooks {
					if h.Path != hook {
						t.Errorf("hook %v runs %s, want %s", h.Args, h.Path, hook)
					}
				}
			})
		}
	}
}

// The chart's plugin pod mounts the host's driver root at /driver-root: nvcdi reads the
// driver there, and the specs, which the container runtime reads on the host, name the
// host's paths.
func TestPluginInAContainerNamesTheHostsDriverRoot(t *testing.T) {
	const hostRoot, hook = "/run/nvidia/driver", "/usr/bin/nvidia-cdi-hook"
	n := newNode(t, "dgx-h100", func(c *plugin.Config) {
		c.ContainerDriverRoot, c.DriverRoot = c.DriverRoot, hostRoot
		c.CDIHookPath = hook
	})
	mounted := n.cfg.ContainerDriverRoot
	version := withDriverFiles(t, mounted, "dgx-h100")
	d := n.newDriver(nil)
	c := n.allocate(wholeGPU)
	mustPrepare(t, d, c)
	spec := n.spec(c)
	e := spec.Devices[0].ContainerEdits

	lib := "/" + nvmlsim.LibDir() + "/libnvidia-ml.so." + version
	if got := mountedAt(spec.ContainerEdits.Mounts)[lib]; got != hostRoot+lib {
		t.Errorf("spec mounts %s from %q, want %q", lib, got, hostRoot+lib)
	}
	for _, want := range []string{hostRoot + "/dev/nvidiactl", hostRoot + "/dev/nvidia2"} {
		if !slices.Contains(slices.Concat(hostPaths(spec.ContainerEdits.DeviceNodes), hostPaths(e.DeviceNodes)), want) {
			t.Errorf("spec device nodes %v, %v lack %s", hostPaths(spec.ContainerEdits.DeviceNodes), hostPaths(e.DeviceNodes), want)
		}
	}
	// Nothing names the plugin's own view of the driver root: not a mount, a device
	// node or a hook's argument (apply-cuda-memory-limits gets --driver-root).
	var hostSide []string
	for _, edits := range []cdispec.ContainerEdits{spec.ContainerEdits, e} {
		hostSide = append(hostSide, hostPaths(edits.DeviceNodes)...)
		for _, m := range edits.Mounts {
			hostSide = append(hostSide, m.HostPath)
		}
		for _, h := range edits.Hooks {
			hostSide = append(hostSide, h.Args...)
		}
	}
	for _, p := range hostSide {
		if strings.Contains(p, mounted) {
			t.Errorf("spec names %s, the plugin's mount of the driver root, not the host's %s", p, hostRoot)
		}
	}
	if !slices.Contains(hostSide, hostRoot) {
		t.Errorf("no hook gets --driver-root %s: %v", hostRoot, hookVerbs(e.Hooks))
	}
}

func TestDriverRootWithoutLibrariesStillPrepares(t *testing.T) {
	n := newNode(t, "dgx-h100")
	var logs strings.Builder
	ctx := klog.NewContext(context.Background(), funcr.New(func(prefix, args string) {
		logs.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{}))
	d, err := plugin.New(ctx, n.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "no NVIDIA driver libraries") || !strings.Contains(logs.String(), "libcuda.so.") {
		t.Errorf("the log does not say the driver libraries are missing:\n%s", logs.String())
	}
	c := n.allocate(wholeGPU)
	mustPrepare(t, d, c)
	spec := n.spec(c)
	if !slices.Contains(spec.ContainerEdits.Env, cdi.VisibleDevicesGuard) {
		t.Errorf("spec env %v lacks %s: NVIDIA's runtime would inject the claim's devices again", spec.ContainerEdits.Env, cdi.VisibleDevicesGuard)
	}
	if len(spec.ContainerEdits.Mounts) != 0 {
		t.Errorf("spec mounts %v without a driver", spec.ContainerEdits.Mounts)
	}
	if got := hostPaths(spec.ContainerEdits.DeviceNodes); !slices.Contains(got, filepath.Join(n.cfg.DriverRoot, "dev/nvidiactl")) {
		t.Errorf("spec device nodes %v lack nvidiactl", got)
	}
	if got := spec.Devices[0].ContainerEdits.DeviceNodes; len(got) != 1 || got[0].Path != "/dev/nvidia2" {
		t.Errorf("device nodes %+v, want gpudra's /dev/nvidia2", got)
	}
}

func TestRealBackendRefusesADriverRootWithoutLibraries(t *testing.T) {
	n := newNode(t, "dgx-h100")
	cfg := n.cfg
	b := *cfg.Backend
	b.Simulated, b.Name = false, "nvml"
	cfg.Backend, cfg.MPS, cfg.TimeSlicer = &b, nil, nil
	_, err := plugin.New(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "no NVIDIA driver under driver root "+cfg.DriverRoot) {
		t.Errorf("got %v, want an error naming the driver root without a driver", err)
	}
}

// containerEnv is the environment of a container made from a CUDA image (whose Dockerfile
// sets NVIDIA_VISIBLE_DEVICES=all) and given the prepared devices, as containerd makes it
// from the node's CDI specs before it runs the OCI runtime, which may be NVIDIA's. Device
// nodes the driver root lacks (MIG capability nodes) are made FIFOs, which the CDI
// library takes.
func containerEnv(t *testing.T, n *node, devs ...kubeletplugin.Device) map[string]string {
	t.Helper()
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(n.cfg.CDIRoot), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range devs {
		ids = append(ids, d.CDIDeviceIDs...)
		for _, id := range d.CDIDeviceIDs {
			dev := cache.GetDevice(id)
			for _, dn := range slices.Concat(dev.GetSpec().ContainerEdits.DeviceNodes, dev.ContainerEdits.DeviceNodes) {
				if err := unix.Mkfifo(dn.HostPath, 0o600); err != nil && !errors.Is(err, os.ErrExist) {
					t.Fatal(err)
				}
			}
		}
	}
	spec := &oci.Spec{Process: &oci.Process{Env: []string{"PATH=/usr/bin", "NVIDIA_VISIBLE_DEVICES=all"}}}
	if unresolved, err := cache.InjectDevices(spec, ids...); err != nil {
		t.Fatalf("injecting %v (unresolved %v): %v", ids, unresolved, err)
	}
	return env(cdispec.ContainerEdits{Env: spec.Process.Env})
}

func hostPaths(nodes []*cdispec.DeviceNode) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.HostPath)
	}
	return out
}
