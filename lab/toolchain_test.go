package lab

import (
	"os"
	"os/exec"
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

// make lint vets with the e2e tag only the packages whose files the tag changes; a non-test
// file that changes with it changes every importer, and then every package is vetted.
func TestTaggedPackagesAreWhatTheTagChanges(t *testing.T) {
	script, err := filepath.Abs(filepath.Join("..", "hack", "tagged-packages.sh"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n\ngo 1.26\n")
	write("a/a.go", "package a\n")
	write("a/a_e2e_test.go", "//go:build e2e\n\npackage a\n")
	write("b/b.go", "package b\n")
	write("b/b_test.go", "package b\n")
	write("c/c.go", "package c\n")
	write("c/c_unit_test.go", "//go:build !e2e\n\npackage c\n")
	run := func() []string {
		t.Helper()
		cmd := exec.Command(script, "e2e")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
		return strings.Fields(string(out))
	}
	if got, want := run(), []string{"example.com/m/a", "example.com/m/c"}; !slices.Equal(got, want) {
		t.Errorf("packages the e2e tag changes: %v, want %v", got, want)
	}
	write("b/b_e2e.go", "//go:build e2e\n\npackage b\n\nconst E2E = true\n")
	if got := run(); !slices.Equal(got, []string{"./..."}) {
		t.Errorf("with a non-test file tagged e2e: %v, want ./...", got)
	}
}

// make lint runs go vet with the e2e tag on what hack/tagged-packages.sh prints.
func TestMakeLintVetsWhatTheE2ETagChanges(t *testing.T) {
	makefile, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	lint := regexp.MustCompile(`(?m)^lint:.*\n((?:\t.*\n)+)`).FindSubmatch(makefile)
	if lint == nil {
		t.Fatal("the Makefile has no lint target")
	}
	if !regexp.MustCompile(`pkgs=\$\$\(hack/tagged-packages\.sh e2e\b[^)]*\).*go vet -tags e2e \$\$pkgs`).Match(lint[1]) {
		t.Errorf("make lint does not vet with the e2e tag what hack/tagged-packages.sh prints:\n%s", lint[1])
	}
}
