package lab

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The lab's nvidia-cdi-hook runs the hooks that the kubelet plugin's nvcdi writes; both come
// from one nvidia-container-toolkit version, go.mod's.
func TestToolchainBuildsTheNvidiaCDIHookOfGoMod(t *testing.T) {
	gomod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`(?m)^\s*github\.com/NVIDIA/nvidia-container-toolkit (v\S+)`).FindSubmatch(gomod)
	if want == nil {
		t.Fatal("go.mod does not require github.com/NVIDIA/nvidia-container-toolkit")
	}
	got := regexp.MustCompile(`(?m)^NVIDIA_CTK_VERSION=\$\{NVIDIA_CTK_VERSION:-(v\S+)\}$`).FindSubmatch(toolchainScript)
	if got == nil {
		t.Fatal("toolchain.sh pins no NVIDIA_CTK_VERSION")
	}
	if string(got[1]) != string(want[1]) {
		t.Errorf("toolchain.sh builds nvidia-cdi-hook %s, go.mod's nvcdi is %s", got[1], want[1])
	}
}

// The lab's etcd is the release gpudra's build list selects (the one Kubernetes' client
// libraries are pinned to, and the one Kubernetes names in its build/dependencies.yaml):
// make toolchain builds it with that build list, and toolchain.sh refuses another version.
func TestToolchainBuildsTheEtcdOfGoMod(t *testing.T) {
	gomod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`(?m)^\s*go\.etcd\.io/etcd/client/v3 (v\S+)`).FindSubmatch(gomod)
	if want == nil {
		t.Fatal("go.mod does not require go.etcd.io/etcd/client/v3")
	}
	got := regexp.MustCompile(`(?m)^ETCD_VERSION=\$\{ETCD_VERSION:-(v\S+)\}$`).FindSubmatch(toolchainScript)
	if got == nil {
		t.Fatal("toolchain.sh pins no ETCD_VERSION")
	}
	if string(got[1]) != string(want[1]) {
		t.Errorf("toolchain.sh builds etcd %s, go.mod's etcd client is %s", got[1], want[1])
	}
}

// make toolchain builds what the end-to-end lab (deployments/lab/e2e.yaml) needs, no more:
// the suite's lab then builds nothing, and a component no lab file asks for costs no CI time.
func TestMakeToolchainBuildsWhatTheE2ELabNeeds(t *testing.T) {
	makefile, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^toolchain:.*\n\t((?:[A-Z_]+=\S+ )*)lab/toolchain\.sh (.*)$`).FindSubmatch(makefile)
	if m == nil {
		t.Fatal("the Makefile has no toolchain target running lab/toolchain.sh")
	}
	// The control plane is built with gpudra's module versions and flags, so that a cold
	// build reuses what make build compiled.
	if !strings.Contains(string(m[1]), "GPUDRA_BUILD_LIST=$(CURDIR) ") {
		t.Errorf("make toolchain runs lab/toolchain.sh with %q, want GPUDRA_BUILD_LIST=$(CURDIR)", m[1])
	}
	m = m[1:]
	f, err := LoadFile(filepath.Join("..", "deployments", "lab", "e2e.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := f.toolchainNeeds(slices.ContainsFunc(f.Nodes(), func(n Node) bool { return n.Real })).components()
	if got := strings.Fields(string(m[1])); !slices.Equal(got, want) {
		t.Errorf("make toolchain builds %v; the end-to-end lab needs %v", got, want)
	}
}
