package release

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Each image is built with cgo exactly when its binary imports a package outside the
// standard library that has C code: the plugin (go-nvml), not the controller or the
// scheduler, which then build with CGO_ENABLED=0 for the static base.
func TestImagesUseCgoExactlyWhenTheirBinaryNeedsIt(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the binaries' packages")
	}
	for _, img := range Images {
		cmd := exec.Command("go", "list", "-deps", "-f", "{{if and .CgoFiles (not .Standard)}}{{.ImportPath}}{{end}}", "./cmd/"+img.Binary)
		cmd.Dir = filepath.Join("..", "..")
		cmd.Env = append(cmd.Environ(), "CGO_ENABLED=1")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list ./cmd/%s: %v", img.Binary, err)
		}
		cgoPackages := strings.Fields(string(out))
		if needs := len(cgoPackages) > 0; needs != img.CGO {
			t.Errorf("%s: CGO %v, but the packages with C code it imports are %v", img.Binary, img.CGO, cgoPackages)
		}
	}
}

func TestImageNamesEntrypointAndUser(t *testing.T) {
	if got := Controller.Ref("registry.example/gpu", "1.2.3"); got != "registry.example/gpu/gpudra-controller:1.2.3" {
		t.Errorf("Ref = %q", got)
	}
	cfg := Plugin.Config()
	if len(cfg.Entrypoint) != 1 || cfg.Entrypoint[0] != "/usr/bin/gpudra-kubelet-plugin" || cfg.User != "0:0" {
		t.Errorf("the plugin's image config is %+v, want entrypoint /usr/bin/gpudra-kubelet-plugin as root", cfg)
	}
	for _, img := range []Image{Controller, Scheduler} {
		if img.Config().User != "65532:65532" {
			t.Errorf("%s runs as %q, want nonroot (65532:65532), the chart's runAsUser", img.Binary, img.Config().User)
		}
	}
}
