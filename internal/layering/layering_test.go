// Package layering checks the import graph that keeps gpudra's binaries small and its
// packages in their rooms: the cluster-side binaries link no NVML code, the API package is
// a leaf, the pure topology packages know nothing of the device model, locality imports
// only the API, the kubelet plugin's subsystems do not reach into its core, and only
// binaries and tests use the lab.
package layering

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/gpudra/gpudra"

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
	Error      *struct{ Err string }
}

// goList runs go list -json over patterns from the module root with extra environment.
func goList(t *testing.T, env []string, args ...string) []pkg {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-e", "-json=ImportPath,Imports,Deps,Error"}, args...)...)
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(out)
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	return pkgs
}

func local(path string) string { return strings.TrimPrefix(strings.TrimPrefix(path, module), "/") }

func under(path, dir string) bool {
	p := local(path)
	return strings.HasPrefix(path, module) && (p == dir || strings.HasPrefix(p, dir+"/"))
}

// The controller and the scheduler run on any node of the cluster: they must build without
// cgo and link neither go-nvml, the simulator nor discovery.
func TestClusterSideBinariesBuildWithoutCgoOrNVML(t *testing.T) {
	forbidden := []string{"github.com/NVIDIA/go-nvml", module + "/driver/nvmlsim", module + "/driver/discover", module + "/driver/simulated", module + "/lab"}
	for _, p := range goList(t, []string{"CGO_ENABLED=0"}, "./cmd/gpudra-controller", "./cmd/gpudra-scheduler") {
		if p.Error != nil {
			t.Errorf("%s does not build with CGO_ENABLED=0: %s", p.ImportPath, p.Error.Err)
		}
		for _, d := range p.Deps {
			for _, f := range forbidden {
				if d == f || strings.HasPrefix(d, f+"/") {
					t.Errorf("%s links %s", p.ImportPath, d)
				}
			}
		}
	}
}

// go-nvml leaves NVML's symbols unresolved until first use (libnvidia-ml is loaded with
// dlopen). A binary that also links Go's plugin package is linked with BIND_NOW and dies
// at start-up with "undefined symbol: nvml..." on every machine. Helm's action package and
// k8s.io/cli-runtime's resource builder (through kustomize) bring plugin in: the binaries
// that link go-nvml, and the test binaries of every package that does, must not.
func TestNVMLBinariesLinkNoGoPlugin(t *testing.T) {
	for _, p := range goList(t, nil, "-test", "./...") {
		var nvml, plugin bool
		for _, d := range p.Deps {
			nvml = nvml || d == "github.com/NVIDIA/go-nvml/pkg/nvml"
			plugin = plugin || d == "plugin"
		}
		if nvml && plugin {
			t.Errorf("%s links go-nvml and Go's plugin package (Helm's action package or k8s.io/cli-runtime's resource builder?): its binaries would be bound at start-up and fail on NVML's symbols", p.ImportPath)
		}
	}
}

// pluginSubsystems are the kubelet plugin's parts that live beside its core
// (kubeletplugin): each talks to the core through interfaces it declares, and never
// imports it.
var pluginSubsystems = []string{"mps", "usage", "health", "checkpoint", "prepared"}

// pluginSubsystem is the subsystem path is in ("" when none).
func pluginSubsystem(path string) string {
	for _, s := range pluginSubsystems {
		if under(path, "kubeletplugin/"+s) {
			return s
		}
	}
	return ""
}

func TestImportRules(t *testing.T) {
	pkgs := goList(t, nil, "./...")
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages", len(pkgs))
	}
	// Each subsystem the rules name is a package of its own, so that the rule below
	// checks it rather than nothing.
	for _, sub := range pluginSubsystems {
		if !slices.ContainsFunc(pkgs, func(p pkg) bool { return under(p.ImportPath, "kubeletplugin/"+sub) }) {
			t.Errorf("the kubelet plugin has no subsystem package kubeletplugin/%s", sub)
		}
	}
	for _, p := range pkgs {
		for _, imp := range p.Imports {
			switch {
			case under(p.ImportPath, "api") && (strings.HasPrefix(imp, module) || strings.HasPrefix(imp, "k8s.io/client-go") || strings.HasPrefix(imp, "github.com/NVIDIA")):
				t.Errorf("%s is a leaf but imports %s", local(p.ImportPath), imp)
			case under(p.ImportPath, "topology") && (under(imp, "driver") || under(imp, "kubeletplugin") || under(imp, "queueing")):
				t.Errorf("%s is pure topology but imports %s", local(p.ImportPath), local(imp))
			case under(p.ImportPath, "locality") && strings.HasPrefix(imp, module) && !under(imp, "api"):
				t.Errorf("%s knows where data is from plain objects and imports only the API, not %s", local(p.ImportPath), local(imp))
			case under(imp, "lab") && !under(p.ImportPath, "cmd") && !under(p.ImportPath, "lab") && !under(p.ImportPath, "test"):
				t.Errorf("%s imports the lab; only binaries and tests may", local(p.ImportPath))
			case local(p.ImportPath) == "driver" && strings.HasPrefix(imp, "github.com/NVIDIA/go-nvml"):
				t.Errorf("the device model imports %s; NVML belongs in driver/discover", imp)
			}
			if sub := pluginSubsystem(p.ImportPath); sub != "" && imp == module+"/kubeletplugin" {
				t.Errorf("%s imports the kubelet plugin's core; it must take what it needs through an interface of its own", local(p.ImportPath))
			} else if sub == "prepared" && under(imp, "kubeletplugin") {
				t.Errorf("%s imports %s; the prepared claims' types import no other part of the plugin", local(p.ImportPath), local(imp))
			}
		}
	}
}
