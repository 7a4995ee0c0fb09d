package lab

import (
	"os"
	"regexp"
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
