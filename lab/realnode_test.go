package lab

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/yaml"
)

func TestCRILogText(t *testing.T) {
	log := "2026-11-29T17:00:00.1Z stdout F device /dev/nvidia0 char 195:0\n" +
		"2026-11-29T17:00:00.2Z stdout P env NVIDIA_VISIBLE_DEVICES=GPU-\n" +
		"2026-11-29T17:00:00.3Z stdout F 1234\n" +
		"2026-11-29T17:00:00.4Z stderr F text with  two spaces\n"
	want := "device /dev/nvidia0 char 195:0\nenv NVIDIA_VISIBLE_DEVICES=GPU-1234\ntext with  two spaces\n"
	if got := criLogText(log); got != want {
		t.Errorf("criLogText:\n got %q\nwant %q", got, want)
	}
}

// TestCheckRealNodeHostNamesWhatIsMissing: without root, the host check refuses a real node
// and says it needs root (run as nobody when the test itself runs as root).
func TestCheckRealNodeHostNamesWhatIsMissing(t *testing.T) {
	if os.Getenv("GPUDRA_HOSTCHECK_CHILD") == "1" {
		fmt.Println("hostcheck:", CheckRealNodeHost())
		return
	}
	if os.Geteuid() != 0 {
		if err := CheckRealNodeHost(); err == nil || !strings.Contains(err.Error(), "missing root") {
			t.Fatalf("as uid %d: CheckRealNodeHost() = %v, want it to name root", os.Geteuid(), err)
		}
		return
	}
	// Root: run this test again as nobody, from a copy of the test binary nobody can execute.
	dir, err := os.MkdirTemp("", "gpudra-hostcheck-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "lab.test")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestCheckRealNodeHostNamesWhatIsMissing$")
	cmd.Env = append(os.Environ(), "GPUDRA_HOSTCHECK_CHILD=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "hostcheck: this machine cannot run a real lab node: missing root") {
		t.Fatalf("as nobody, the host check said:\n%s", out)
	}
}

// A real node may have a simulated AMD profile: the lab file accepts it, its chart pool runs
// the plugin on that KFD tree (without NVML when the node names no NVML profile), and its
// fake driver root holds /dev/kfd and the DRM render and card nodes its CDI specs name.
func TestRealAMDNode(t *testing.T) {
	f, err := ParseFile([]byte(`apiVersion: lab.gpudra.dev/v1alpha1
kind: Lab
blocks: [{name: b, racks: [{name: r, nodes: [{name: real-amd, kfd: mixed-l40s-mi210, real: true}]}]}]
`))
	if err != nil {
		t.Fatalf("a real node with kfd: %v", err)
	}
	nodes := f.Nodes()
	if len(nodes) != 1 || !nodes[0].Real || nodes[0].KFD != "mixed-l40s-mi210" {
		t.Fatalf("nodes %+v", nodes)
	}
	u := &upper{file: &File{}, ports: map[string]int{"controller-webhook": 9443, "metrics-real-amd": 9500},
		layout: Layout{Root: "/lab"}, tc: &Toolchain{},
		state: &State{Server: "https://127.0.0.1:6443", Nodes: nodes}}
	data, err := u.chartValues()
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		KubeletPlugin struct {
			Pools []struct{ Name, NVML, KFD string } `json:"pools"`
		} `json:"kubeletPlugin"`
	}
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	if p := v.KubeletPlugin.Pools; len(p) != 1 || p[0].NVML != "none" || p[0].KFD != "sim:mixed-l40s-mi210" {
		t.Errorf("the real AMD node's chart pools %+v, want one with nvml none and kfd sim:mixed-l40s-mi210", p)
	}

	root := t.TempDir()
	if err := makeFakeDriverRoot(root); errors.Is(err, syscall.EPERM) {
		t.Skipf("this machine may not make device files: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string][2]uint32{"dev/kfd": {kfdMajor, 0}, "dev/dri/renderD128": {drmMajor, 128}, "dev/dri/card1": {drmMajor, 1}, "dev/nvidia0": {nvidiaMajor, 0}} {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(root, path), &st); err != nil {
			t.Errorf("fake driver root: %v", err)
			continue
		}
		if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != want[0] || unix.Minor(st.Rdev) != want[1] {
			t.Errorf("%s: mode %o, %d:%d; want a character device %d:%d", path, st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev), want[0], want[1])
		}
	}
}
