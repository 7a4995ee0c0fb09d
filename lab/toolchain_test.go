package lab

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The toolchain builds the versions go.mod names: the lab's nvidia-cdi-hook runs the hooks
// that the kubelet plugin's nvcdi writes, so both come from one nvidia-container-toolkit;
// the lab's etcd is the release gpudra's build list selects (the one Kubernetes' client
// libraries are pinned to and Kubernetes names in its build/dependencies.yaml), which make
// toolchain builds with that build list, and toolchain.sh refuses another.
func TestToolchainBuildsTheVersionsOfGoMod(t *testing.T) {
	gomod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, pin := range []struct{ variable, module string }{
		{"NVIDIA_CTK_VERSION", "github.com/NVIDIA/nvidia-container-toolkit"},
		{"ETCD_VERSION", "go.etcd.io/etcd/client/v3"},
	} {
		want := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(pin.module) + ` (v\S+)`).FindSubmatch(gomod)
		if want == nil {
			t.Errorf("go.mod does not require %s", pin.module)
			continue
		}
		got := regexp.MustCompile(`(?m)^` + pin.variable + `=\$\{` + pin.variable + `:-(v\S+)\}$`).FindSubmatch(toolchainScript)
		if got == nil {
			t.Errorf("toolchain.sh pins no %s", pin.variable)
			continue
		}
		if string(got[1]) != string(want[1]) {
			t.Errorf("toolchain.sh's %s is %s, go.mod's %s is %s", pin.variable, got[1], pin.module, want[1])
		}
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
