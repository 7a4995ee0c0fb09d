package webview_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The first run on a machine without Chromium installs it with apt-get (updating the package
// lists when the first install fails), and a second run installs nothing.
func TestInstallChromiumOnAFreshMachine(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "usr-bin", "chromium")
	log := filepath.Join(dir, "apt.log")
	stubs := filepath.Join(dir, "stubs")
	if err := os.MkdirAll(stubs, 0o755); err != nil {
		t.Fatal(err)
	}
	// apt-get fails its first install (stale lists), and installs after an update.
	aptGet := `#!/bin/sh
echo "$*" >> ` + log + `
case "$*" in
update) touch ` + dir + `/updated ;;
"install -y chromium")
	[ -e ` + dir + `/updated ] || exit 100
	mkdir -p ` + filepath.Dir(bin) + `
	printf '#!/bin/sh\necho Chromium 148\n' > ` + bin + `
	chmod +x ` + bin + ` ;;
esac
`
	for name, body := range map[string]string{"apt-get": aptGet, "sudo": "#!/bin/sh\nexec \"$@\"\n"} {
		if err := os.WriteFile(filepath.Join(stubs, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	run := func() string {
		t.Helper()
		cmd := exec.Command("bash", filepath.Join("..", "hack", "install-chromium.sh"))
		cmd.Env = append(os.Environ(), "PATH="+stubs+":"+os.Getenv("PATH"), "GPUDRA_CHROMIUM_BIN="+bin, "CHROMIUM=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("install-chromium.sh: %v\n%s", err, out)
		}
		return string(out)
	}
	if out := run(); !strings.Contains(out, "Chromium 148") {
		t.Errorf("first run printed %q, want the installed browser's version", out)
	}
	calls, _ := os.ReadFile(log)
	if got := strings.Fields(strings.ReplaceAll(string(calls), "\n", " | ")); strings.Join(got, " ") != "install -y chromium | update | install -y chromium |" {
		t.Errorf("apt-get calls %q, want install, update, install", calls)
	}
	os.Remove(log)
	run()
	if calls, err := os.ReadFile(log); err == nil {
		t.Errorf("second run called apt-get again: %q", calls)
	}
}
