package lab

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
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
