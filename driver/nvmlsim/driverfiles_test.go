package nvmlsim_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpudra/gpudra/driver/nvmlsim"
)

func TestWriteDriverFilesMatchesTheProfilesDriverVersion(t *testing.T) {
	root := t.TempDir()
	for range 2 { // a second call keeps what the first wrote
		version, err := nvmlsim.WriteDriverFiles(root, "dgx-v100")
		if err != nil {
			t.Fatal(err)
		}
		server, _, err := nvmlsim.Open("dgx-v100", "node-a")
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := server.SystemGetDriverVersion(); version != want {
			t.Fatalf("driver files for %s, the profile reports %s", version, want)
		}
		for _, lib := range nvmlsim.DriverLibraries {
			if link, err := os.Readlink(filepath.Join(root, nvmlsim.LibDir(), lib+".so.1")); err != nil || link != lib+".so."+version {
				t.Errorf("%s.so.1 -> %q (%v), want %s.so.%s", lib, link, err, lib, version)
			}
		}
		if info, err := os.Stat(filepath.Join(root, "usr/bin/nvidia-smi")); err != nil || info.Mode().Perm()&0o111 == 0 {
			t.Errorf("nvidia-smi: %v, %v; want an executable", info, err)
		}
	}
}
