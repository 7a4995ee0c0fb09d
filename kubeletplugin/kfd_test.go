package kubeletplugin_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpudra/gpudra/driver/discover"
	"github.com/gpudra/gpudra/driver/kfdsim"
	plugin "github.com/gpudra/gpudra/kubeletplugin"
)

// newKFDNode is a simulated AMD node without NVIDIA GPUs: no NVML at all.
func newKFDNode(t *testing.T, profile string) *node {
	t.Helper()
	p, err := kfdsim.Load(profile)
	if err != nil {
		t.Fatal(err)
	}
	b := &discover.Backend{Name: "kfd-sim:" + profile, KFD: p.Tree(nodeName), Simulated: true}
	dir := t.TempDir()
	t.Cleanup(func() { unmountUnder(t, dir) })
	bootID := filepath.Join(dir, "boot_id")
	if err := os.WriteFile(bootID, []byte("boot-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := plugin.Config{NodeName: nodeName, Backend: b, CDIRoot: filepath.Join(dir, "cdi"), CheckpointDir: filepath.Join(dir, "checkpoint"),
		DriverRoot: filepath.Join(dir, "root"), BootIDPath: bootID}
	return nodeOn(t, b, cfg)
}

// The plugin runs on a node of AMD GPUs only and prepares a claim for two of them as a CDI
// device with /dev/kfd and their render and card nodes, and ROCR_VISIBLE_DEVICES; the claim
// survives a restart of the plugin and is unprepared.
func TestAMDNodePreparesKFDAndRenderNodes(t *testing.T) {
	n := newKFDNode(t, "mi300x-8")
	d := n.newDriver(nil)
	c := n.allocate(`
devices:
  requests:
  - name: gpus
    exactly: {deviceClassName: amd-gpu.gpudra.dev, count: 2}
  constraints:
  - matchAttribute: gpu.gpudra.dev/xgmiHive
`)
	mustPrepare(t, d, c)
	spec := n.spec(c)
	var paths, envs []string
	for _, dev := range spec.Devices {
		for _, dn := range dev.ContainerEdits.DeviceNodes {
			paths = append(paths, dn.Path)
		}
		envs = append(envs, dev.ContainerEdits.Env...)
	}
	for _, dn := range spec.ContainerEdits.DeviceNodes {
		paths = append(paths, dn.Path)
	}
	for _, want := range []string{"/dev/kfd", "/dev/dri/renderD128", "/dev/dri/card0", "/dev/dri/renderD129", "/dev/dri/card1"} {
		if !slices.Contains(paths, want) {
			t.Errorf("device nodes %v lack %s", paths, want)
		}
	}
	if slices.ContainsFunc(paths, func(p string) bool { return strings.Contains(p, "nvidia") }) {
		t.Errorf("device nodes %v name NVIDIA's", paths)
	}
	if !slices.ContainsFunc(envs, func(kv string) bool {
		return strings.HasPrefix(kv, "ROCR_VISIBLE_DEVICES=GPU-") && strings.Count(kv, ",") == 1
	}) {
		t.Errorf("env %v has no ROCR_VISIBLE_DEVICES of two GPUs", envs)
	}
	d = n.newDriver(nil) // a restart keeps the prepared claim
	if err := unprepare(t, d, c); err != nil {
		t.Fatal(err)
	}
	if n.specCount() != 0 {
		t.Error("the claim's CDI spec is left after unprepare")
	}
}

// An XGMI group of 4 is prepared as one CDI device with /dev/kfd, every member's render
// node and ROCR_VISIBLE_DEVICES of its four GPUs.
func TestAMDNodePreparesAnXGMIGroup(t *testing.T) {
	n := newKFDNode(t, "mi300x-8")
	d := n.newDriver(nil)
	c := n.allocate(`
devices:
  requests:
  - name: group
    exactly:
      deviceClassName: gpu-group.gpudra.dev
      selectors:
      - cel: {expression: 'device.attributes["gpu.gpudra.dev"].members == "4-5-6-7"'}
`)
	mustPrepare(t, d, c)
	spec := n.spec(c)
	if len(spec.Devices) != 1 {
		t.Fatalf("CDI spec has %d devices, want one for the group", len(spec.Devices))
	}
	var paths []string
	for _, dn := range slices.Concat(spec.ContainerEdits.DeviceNodes, spec.Devices[0].ContainerEdits.DeviceNodes) {
		paths = append(paths, dn.Path)
	}
	for _, want := range []string{"/dev/kfd", "/dev/dri/renderD132", "/dev/dri/renderD133", "/dev/dri/renderD134", "/dev/dri/renderD135"} {
		if !slices.Contains(paths, want) {
			t.Errorf("device nodes %v lack %s", paths, want)
		}
	}
	for _, other := range []string{"/dev/dri/renderD128", "/dev/dri/renderD131"} {
		if slices.Contains(paths, other) {
			t.Errorf("device nodes %v give the container %s, which is not in the group", paths, other)
		}
	}
	if !slices.ContainsFunc(spec.Devices[0].ContainerEdits.Env, func(kv string) bool {
		return strings.HasPrefix(kv, "ROCR_VISIBLE_DEVICES=GPU-") && strings.Count(kv, ",") == 3
	}) {
		t.Errorf("env %v has no ROCR_VISIBLE_DEVICES of four GPUs", spec.Devices[0].ContainerEdits.Env)
	}
	if err := unprepare(t, d, c); err != nil {
		t.Fatal(err)
	}
}
