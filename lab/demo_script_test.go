package lab

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDemoScriptRunsFromTheRepositoryRoot runs lab/demo.sh, as `make demo` does on a fresh
// clone, from another working directory with stand-ins for make and the CLI: the build must
// run in the repository root, and the demo must get the caller's arguments.
func TestDemoScriptRunsFromTheRepositoryRoot(t *testing.T) {
	root := t.TempDir()
	script, err := os.ReadFile("demo.sh")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "lab"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "lab", "demo.sh"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "Makefile"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	stubs := t.TempDir()
	record := filepath.Join(t.TempDir(), "record")
	// The stand-in make "builds" bin/gpudra, a script that records where it ran and its arguments.
	stubMake := `#!/usr/bin/env bash
set -eu
echo "make $PWD $*" >>"$RECORD"
[[ -f Makefile ]] || { echo "make: no Makefile in $PWD" >&2; exit 2; }
mkdir -p bin
printf '#!/usr/bin/env bash\necho "gpudra $PWD $*" >>"$RECORD"\n' >bin/gpudra
chmod +x bin/gpudra
`
	if err := os.WriteFile(filepath.Join(stubs, "make"), []byte(stubMake), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", filepath.Join(root, "lab", "demo.sh"), "--lab-file=x.yaml")
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "PATH="+stubs+":"+os.Getenv("PATH"), "RECORD="+record)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("demo.sh: %v\n%s", err, out)
	}
	got, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	want := "make " + root + " --no-print-directory build\ngpudra " + root + " lab demo --lab-file=x.yaml\n"
	if string(got) != want {
		t.Errorf("demo.sh ran:\n%s\nwant:\n%s", got, want)
	}
	if strings.Contains(string(got), filepath.Dir(root)+" ") {
		t.Errorf("demo.sh left the repository root")
	}
}
