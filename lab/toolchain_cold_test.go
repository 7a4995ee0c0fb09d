package lab

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// stubGo stands in for the go command in toolchain.sh's builds: module commands do nothing (a
// download points at a small fake module), and a build or install "builds" for a second, then
// writes its output, or fails for a package matching $STUB_GO_FAIL.
const stubGo = `#!/usr/bin/env bash
set -eu
last=${!#}
[[ -z ${STUB_GO_LOG:-} ]] || echo "CGO_ENABLED=${CGO_ENABLED:-} $*" >>"$STUB_GO_LOG"
build() { # $1 = output file, $2 = package
  sleep 1
  if [[ -n ${STUB_GO_FAIL:-} && $2 == *"$STUB_GO_FAIL"* ]]; then
    echo "stub go: cannot build $2" >&2; exit 1
  fi
  mkdir -p "$(dirname "$1")"; printf '#!/bin/sh\necho stub %s\n' "$2" >"$1"; chmod +x "$1"
}
case $1 in
  mod)
    case $2 in
      init) echo "module $3" >go.mod ;;
      download) printf '{\n\t"Path": "%s",\n\t"Dir": "%s",\n\t"GoMod": "%s/go.mod"\n}\n' "$last" "$STUB_GO_MODULE" "$STUB_GO_MODULE" ;;
    esac ;;
  build)
    out=
    while (( $# )); do [[ $1 == -o ]] && { out=$2; shift; }; shift; done
    build "$out" "$last" ;;
  install)
    name=${last%@*}; build "$GOBIN/${name##*/}" "$last" ;;
esac
`

// stubToolchain puts a stub go (and apt-get, for runc's seccomp headers) first in PATH and a
// fake module for its downloads, and points GPUDRA_CACHE at a folder that does not exist yet.
func stubToolchain(t *testing.T) (cache string) {
	t.Helper()
	dir := t.TempDir()
	bin, module := filepath.Join(dir, "bin"), filepath.Join(dir, "module")
	for path, data := range map[string]string{
		filepath.Join(bin, "go"):      stubGo,
		filepath.Join(bin, "apt-get"): "#!/bin/sh\necho stub apt-get \"$@\"\n",
		// what the k8s, kwok, kueue and jobset builds read from their modules
		filepath.Join(module, "go.mod"):                                                   "module stub\n\nreplace k8s.io/api => ./staging/src/k8s.io/api\n",
		filepath.Join(module, "kustomize/stage/pod/fast.yaml"):                            "kind: Stage\n",
		filepath.Join(module, "config/components/crd/kueue.yaml"):                         "kind: CustomResourceDefinition\n",
		filepath.Join(module, "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml"): "kind: CustomResourceDefinition\n",
		filepath.Join(module, "manifests/base/crds/kubeflow.org_pytorchjobs.yaml"):        "kind: CustomResourceDefinition\n",
		filepath.Join(module, "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml"):  "kind: CustomResourceDefinition\n",
		filepath.Join(module, "config/crd/bases/data.fluid.io_datasets.yaml"):             "kind: CustomResourceDefinition\n",
		filepath.Join(module, "config/crd/bases/data.fluid.io_dataloads.yaml"):            "kind: CustomResourceDefinition\n",
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cache = filepath.Join(dir, "empty", "cache")
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	t.Setenv("STUB_GO_MODULE", module)
	t.Setenv("GPUDRA_CACHE", cache)
	return cache
}

// A first run, from a cache folder that does not exist, builds every component and returns as
// soon as the last one is built: nothing the build script started keeps it waiting.
func TestToolchainFirstRunBuildsEveryComponentFromAnEmptyCache(t *testing.T) {
	cache := stubToolchain(t)
	if err := claimActive(t.TempDir()); err != nil {
		t.Fatalf("claiming the lab from an empty cache: %v", err)
	}
	var progress strings.Builder
	start := time.Now()
	tc, err := EnsureToolchain(t.Context(), &progress, ToolchainNeeds{Kueue: true, JobSet: true, TrainingOperator: true, Trainer: true, Fluid: true, RealNodes: true})
	if err != nil {
		t.Fatalf("first run: %v\nprogress:\n%s", err, progress.String())
	}
	t.Logf("ten stub components built in %s", time.Since(start).Round(time.Millisecond))
	for _, p := range []string{tc.APIServer, tc.ControllerManager, tc.Scheduler, tc.Kubectl, tc.Etcd, tc.Kwok, tc.Kueue,
		tc.Kubelet, tc.Containerd, tc.Ctr, tc.Runc, tc.CDIHook, filepath.Join(tc.CNIBin, "bridge"),
		filepath.Join(tc.KwokStages, "pod/fast.yaml"), filepath.Join(tc.KueueConfig, "crd/kueue.yaml"),
		tc.JobSet, filepath.Join(tc.JobSetConfig, "crd/bases/jobset.x-k8s.io_jobsets.yaml"),
		tc.TrainingOperator, filepath.Join(tc.TrainingOperatorConfig, "crds/kubeflow.org_pytorchjobs.yaml"),
		tc.Trainer, filepath.Join(tc.TrainerConfig, "crds/trainer.kubeflow.org_trainjobs.yaml"),
		filepath.Join(tc.FluidCRDs, "data.fluid.io_datasets.yaml"), filepath.Join(tc.FluidCRDs, "data.fluid.io_dataloads.yaml")} {
		if !strings.HasPrefix(p, cache) {
			t.Errorf("%s is outside the cache %s", p, cache)
		}
		if _, err := os.Stat(p); err != nil {
			t.Errorf("not cached: %v", err)
		}
	}
	for _, line := range []string{"k8s (1/10): building", "cdihook (6/10): built in", "jobset (7/10): built in", "trainingoperator (8/10): built in", "trainer (9/10): built in", "fluid (10/10): built in"} {
		if !strings.Contains(progress.String(), line) {
			t.Errorf("progress does not say %q:\n%s", line, progress.String())
		}
	}
	// A second run finds everything cached and builds nothing.
	progress.Reset()
	t.Setenv("STUB_GO_FAIL", "k8s.io")
	if _, err := EnsureToolchain(t.Context(), &progress, ToolchainNeeds{Kueue: true, JobSet: true, TrainingOperator: true, Trainer: true, Fluid: true, RealNodes: true}); err != nil {
		t.Fatalf("second run rebuilt something: %v\n%s", err, progress.String())
	}
	if strings.Contains(progress.String(), "building") {
		t.Errorf("second run built again:\n%s", progress.String())
	}
}

// With GPUDRA_BUILD_LIST (the Makefile's toolchain target passes the repository), the control
// plane, etcd and the real node's kubelet are built with that module's versions, with cgo and
// without -trimpath, as gpudra's own binaries are, so that a cold build reuses what gpudra's
// build compiled and the kubelet what the control plane's did; without it, as a release of
// Kubernetes or etcd is built.
func TestToolchainBuildsTheControlPlaneLikeGpudrasBuild(t *testing.T) {
	for _, shared := range []bool{false, true} {
		stubToolchain(t)
		log := filepath.Join(t.TempDir(), "go.log")
		t.Setenv("STUB_GO_LOG", log)
		repo := ""
		if shared {
			repo = t.TempDir()
		}
		t.Setenv("GPUDRA_BUILD_LIST", repo)
		if _, err := runToolchain(t.Context(), io.Discard, "k8s", "etcd", "node"); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		builds := map[string]string{}
		listed := 0
		for _, l := range strings.Split(string(data), "\n") {
			for _, cmd := range []string{"k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes/cmd/kubelet", "go.etcd.io/etcd/server/v3"} {
				if strings.Contains(l, " build ") && strings.HasSuffix(l, " "+cmd) {
					builds[cmd] = l
				}
			}
			if strings.Contains(l, " list -m ") && strings.HasSuffix(l, " all") {
				listed++
			}
		}
		wantCgo, wantTrim, wantListed := "CGO_ENABLED=0", true, 0
		if shared {
			// the control plane, etcd and the kubelet, each in its module
			wantCgo, wantTrim, wantListed = "CGO_ENABLED=1", false, 3
		}
		for _, cmd := range []string{"k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes/cmd/kubelet", "go.etcd.io/etcd/server/v3"} {
			build := builds[cmd]
			if !strings.HasPrefix(build, wantCgo+" ") || strings.Contains(build, "-trimpath") != wantTrim {
				t.Errorf("GPUDRA_BUILD_LIST=%q: %s built as %q (want %s, -trimpath %v)", repo, cmd, build, wantCgo, wantTrim)
			}
		}
		if listed != wantListed {
			t.Errorf("GPUDRA_BUILD_LIST=%q: the build list was read %d times, want %d", repo, listed, wantListed)
		}
	}
}

// kwok, JobSet and Trainer are built with Kueue's build list and Kueue's flags: Kueue
// compiles against JobSet's and Trainer's APIs and kwok pins nearly the same Kubernetes, so
// the Kubernetes libraries, controller-runtime and the API packages are compiled once for the
// four (built with their own pins, each compiled them again, 2.5-3 min apiece on a cold
// machine).
func TestToolchainBuildsKwokJobSetAndTrainerWithKueuesBuildList(t *testing.T) {
	stubToolchain(t)
	log := filepath.Join(t.TempDir(), "go.log")
	t.Setenv("STUB_GO_LOG", log)
	if _, err := runToolchain(t.Context(), io.Discard, "kwok", "kueue", "jobset", "trainer"); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	var kueueBuild string
	gets := map[string]string{}
	builds := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		switch {
		case strings.Contains(l, " install ") && strings.Contains(l, "sigs.k8s.io/kueue/cmd/kueue@"):
			kueueBuild = l
		case strings.Contains(l, " get ") && strings.Contains(l, "sigs.k8s.io/kwok@"):
			gets["kwok"] = l
		case strings.Contains(l, " build ") && strings.HasSuffix(l, " sigs.k8s.io/kwok/cmd/kwok"):
			builds["kwok"] = l
		case strings.Contains(l, " get ") && strings.Contains(l, "kubeflow/trainer"):
			gets["trainer"] = l
		case strings.Contains(l, " get ") && strings.Contains(l, "sigs.k8s.io/jobset@"):
			gets["jobset"] = l
		case strings.Contains(l, " build ") && strings.HasSuffix(l, " sigs.k8s.io/jobset"):
			builds["jobset"] = l
		case strings.Contains(l, " build ") && strings.HasSuffix(l, " ."):
			builds["trainer"] = l
		}
	}
	if kueueBuild == "" {
		t.Fatalf("Kueue was not installed; go was called as:\n%s", data)
	}
	kueueVersion := kueueBuild[strings.LastIndex(kueueBuild, "@")+1:]
	flags := func(l string) string {
		return strings.Fields(l)[0] + " trimpath=" + fmt.Sprint(strings.Contains(l, "-trimpath"))
	}
	for _, c := range []string{"kwok", "jobset", "trainer"} {
		if !strings.Contains(gets[c], "sigs.k8s.io/kueue@"+kueueVersion+" ") {
			t.Errorf("%s's module does not select Kueue %s's build list: go %q", c, kueueVersion, gets[c])
		}
		if c != "kwok" && !strings.Contains(gets[c], "sigs.k8s.io/jobset@") {
			t.Errorf("%s's module does not pin JobSet's version: go %q", c, gets[c])
		}
		if builds[c] == "" || flags(builds[c]) != flags(kueueBuild) {
			t.Errorf("%s built as %q, Kueue as %q: the flags differ, so they share no compiled package", c, builds[c], kueueBuild)
		}
	}
}

// A component that fails to build fails the run at once with its log's last lines; the
// components built before it stay cached, and the next run builds only what is missing.
func TestToolchainFailedBuildReportsItsLogAndKeepsWhatWasBuilt(t *testing.T) {
	cache := stubToolchain(t)
	t.Setenv("STUB_GO_FAIL", "go.etcd.io/etcd")
	var progress strings.Builder
	_, err := EnsureToolchain(t.Context(), &progress, ToolchainNeeds{})
	if err == nil {
		t.Fatalf("a failing etcd build was reported as built:\n%s", progress.String())
	}
	for _, want := range []string{"etcd (2/3): FAILED", "stub go: cannot build go.etcd.io/etcd/server/v3"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
	tools := filepath.Join(cache, "toolchain")
	entries, _ := os.ReadDir(tools)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	for _, want := range []string{"kubernetes-v1.37.2/.complete"} {
		if _, err := os.Stat(filepath.Join(tools, want)); err != nil {
			t.Errorf("%s not kept after the etcd failure (cache: %v)", want, names)
		}
	}
	for _, name := range names {
		if strings.HasPrefix(name, "etcd-") && !strings.HasSuffix(name, ".log") {
			t.Errorf("the failed etcd build left %s in the cache", name)
		}
	}
	t.Setenv("STUB_GO_FAIL", "")
	progress.Reset()
	if _, err := EnsureToolchain(t.Context(), &progress, ToolchainNeeds{}); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if got := progress.String(); !strings.Contains(got, "k8s (1/3): cached") || !strings.Contains(got, "etcd (2/3): building") {
		t.Errorf("retry should reuse k8s and build etcd:\n%s", got)
	}
}

// A program that leaves a child behind holding its output (as a killed progress ticker's sleep
// did) does not keep runGroup waiting, and the child is gone afterwards.
func TestRunGroupDoesNotWaitForChildrenLeftBehind(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", `sleep 300 & echo $! >"$1"; echo done`, "bash", pidFile)
	var out, errOut strings.Builder
	if err := runGroup(ctx, cmd, &out, &errOut); err != nil {
		t.Fatalf("runGroup: %v", err)
	}
	if out.String() != "done\n" {
		t.Errorf("stdout %q, want %q", out.String(), "done\n")
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(string(data))
	deadline := time.Now().Add(5 * time.Second)
	for {
		stat, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil || strings.Contains(string(stat), ") Z ") {
			break // gone, or a zombie waiting for init
		}
		if time.Now().After(deadline) {
			t.Fatalf("the child left behind (pid %s) still runs", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A failing program's error quotes its last lines of stderr.
func TestRunToolchainQuotesTheScriptsLastLines(t *testing.T) {
	stubToolchain(t)
	_, err := runToolchain(t.Context(), &strings.Builder{}, "no-such-component")
	if err == nil || !strings.Contains(err.Error(), "unknown component no-such-component (accepted: k8s etcd kwok kueue node cdihook jobset trainingoperator trainer fluid)") {
		t.Fatalf("error %v does not quote the script's message", err)
	}
}
