package lab

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpudra/gpudra/internal/buildinfo"
)

// toolchainScript builds and caches the lab's Kubernetes components (lab/toolchain.sh),
// embedded so that `gpudra lab` works from any directory.
//
//go:embed toolchain.sh
var toolchainScript []byte

// trainingOperatorMain is the lab's main of the Kubeflow training operator
// (lab/trainingoperator_main.go), which toolchain.sh builds in a module of its own.
//
//go:embed trainingoperator_main.go
var trainingOperatorMain []byte

// trainerMain is the lab's main of Kubeflow Trainer (lab/trainer_main.go), which
// toolchain.sh builds in a module of its own.
//
//go:embed trainer_main.go
var trainerMain []byte

// Toolchain is where the cached component binaries are.
type Toolchain struct {
	APIServer, ControllerManager, Scheduler, Kubectl string
	Etcd                                             string
	Kwok                                             string
	KwokStages                                       string // kwok's stage definitions
	Kueue                                            string
	KueueConfig                                      string // Kueue's config/components manifests
	// A real node's programs (only when the lab has real nodes).
	Kubelet, Containerd, Ctr, Runc string
	CNIBin                         string // the CNI plugins' folder
	// CDIHook is nvidia-cdi-hook, for the hooks in a real node's CDI specs
	// (gpudra-kubelet-plugin --nvidia-cdi-hook).
	CDIHook string
	// JobSet is the JobSet controller and JobSetConfig its config/components manifests
	// (only when the lab file's kueue.jobKinds names jobset).
	JobSet, JobSetConfig string
	// TrainingOperator is the Kubeflow training operator under the lab's main and
	// TrainingOperatorConfig its manifests/base (only when kueue.jobKinds names pytorchjob).
	TrainingOperator, TrainingOperatorConfig string
	// Trainer is Kubeflow Trainer under the lab's main and TrainerConfig its manifests/base
	// (only when kueue.jobKinds names trainjob).
	Trainer, TrainerConfig string
	// FluidCRDs is the folder of Fluid's Dataset and DataLoad CRDs (only when the lab
	// file's crds names fluid).
	FluidCRDs string
}

// ToolchainNeeds says which optional components a lab needs besides the default ones.
type ToolchainNeeds struct {
	// Kueue: the lab runs Kueue; JobSet: and the JobSet controller; TrainingOperator: and
	// the Kubeflow training operator; Trainer: and Kubeflow Trainer.
	Kueue, JobSet, TrainingOperator, Trainer bool
	// Fluid: the lab serves Fluid's Dataset and DataLoad CRDs.
	Fluid bool
	// RealNodes: the lab has real nodes (kubelet, containerd, runc, CNI, nvidia-cdi-hook).
	RealNodes bool
}

// components are the toolchain.sh components these needs build, in the order it builds them.
func (needs ToolchainNeeds) components() []string {
	comps := []string{"k8s", "etcd", "kwok"}
	if needs.Kueue {
		comps = append(comps, "kueue")
	}
	if needs.RealNodes {
		comps = append(comps, "node", "cdihook")
	}
	if needs.JobSet {
		comps = append(comps, "jobset")
	}
	if needs.TrainingOperator {
		comps = append(comps, "trainingoperator")
	}
	if needs.Trainer {
		comps = append(comps, "trainer")
	}
	if needs.Fluid {
		comps = append(comps, "fluid")
	}
	return comps
}

// toolchainNeeds are the optional components a lab of this file needs; realNodes: whether it
// runs real nodes.
func (f *File) toolchainNeeds(realNodes bool) ToolchainNeeds {
	return ToolchainNeeds{Kueue: f.Kueue.Enabled, JobSet: f.Kueue.runsJobSet(), TrainingOperator: f.Kueue.runsTrainingOperator(),
		Trainer: f.Kueue.runsTrainer(), Fluid: slices.Contains(f.CRDs, CRDsFluid), RealNodes: realNodes}
}

// runToolchain runs toolchain.sh with args, streaming its progress to progress. A failure
// quotes the script's last lines (for a failed build: the tail of the component's log).
func runToolchain(ctx context.Context, progress io.Writer, args ...string) (string, error) {
	dir, err := os.MkdirTemp("", "gpudra-toolchain-*")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "toolchain.sh")
	if err := os.WriteFile(script, toolchainScript, 0o600); err != nil {
		return "", err
	}
	for name, data := range map[string][]byte{"trainingoperator_main.go": trainingOperatorMain, "trainer_main.go": trainerMain} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return "", err
		}
	}
	var out bytes.Buffer
	tail := &tailWriter{max: 16 << 10}
	cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
	cmd.Env = append(os.Environ(), "GPUDRA_CACHE="+CacheDir())
	// On cancellation the whole build stops (bash, its ticker and the go commands), not just bash.
	if err := runGroup(ctx, cmd, &out, io.MultiWriter(progress, tail)); err != nil {
		return out.String(), fmt.Errorf("toolchain.sh %s: %w\n%s", strings.Join(args, " "), err, indent(tail.lines(25), "    "))
	}
	return out.String(), nil
}

// EnsureToolchain builds whatever components are missing from the cache (minutes on a cold
// machine; progress goes to progress) and returns where they are.
func EnsureToolchain(ctx context.Context, progress io.Writer, needs ToolchainNeeds) (*Toolchain, error) {
	kueue, realNodes := needs.Kueue, needs.RealNodes
	comps := needs.components()
	status, err := runToolchain(ctx, progress, "--status")
	if err != nil {
		return nil, err
	}
	missing := false
	for _, c := range comps {
		missing = missing || strings.Contains(status, c+": missing")
	}
	if missing {
		fmt.Fprintf(progress, "Building the lab's components from the Go module proxy (first run only; a cold build takes 20-30 minutes on 2 cores, cached in %s/toolchain):\n%s", CacheDir(), status)
	}
	if _, err := runToolchain(ctx, progress, comps...); err != nil {
		return nil, fmt.Errorf("build the lab toolchain: %w", err)
	}
	dir := func(c string) (string, error) {
		out, err := runToolchain(ctx, progress, "--dir", c)
		return strings.TrimSpace(out), err
	}
	t := &Toolchain{}
	k8s, err := dir("k8s")
	if err != nil {
		return nil, err
	}
	etcd, err := dir("etcd")
	if err != nil {
		return nil, err
	}
	kwok, err := dir("kwok")
	if err != nil {
		return nil, err
	}
	t.APIServer, t.ControllerManager = filepath.Join(k8s, "bin/kube-apiserver"), filepath.Join(k8s, "bin/kube-controller-manager")
	t.Scheduler, t.Kubectl = filepath.Join(k8s, "bin/kube-scheduler"), filepath.Join(k8s, "bin/kubectl")
	t.Etcd = filepath.Join(etcd, "bin/etcd")
	t.Kwok, t.KwokStages = filepath.Join(kwok, "bin/kwok"), filepath.Join(kwok, "stage")
	if kueue {
		kq, err := dir("kueue")
		if err != nil {
			return nil, err
		}
		t.Kueue, t.KueueConfig = filepath.Join(kq, "bin/kueue"), filepath.Join(kq, "config")
	}
	if realNodes {
		nd, err := dir("node")
		if err != nil {
			return nil, err
		}
		t.Kubelet, t.Containerd = filepath.Join(nd, "bin/kubelet"), filepath.Join(nd, "bin/containerd")
		t.Ctr, t.Runc, t.CNIBin = filepath.Join(nd, "bin/ctr"), filepath.Join(nd, "bin/runc"), filepath.Join(nd, "cni")
		hook, err := dir("cdihook")
		if err != nil {
			return nil, err
		}
		t.CDIHook = filepath.Join(hook, "bin/nvidia-cdi-hook")
	}
	if needs.JobSet {
		js, err := dir("jobset")
		if err != nil {
			return nil, err
		}
		t.JobSet, t.JobSetConfig = filepath.Join(js, "bin/jobset"), filepath.Join(js, "config")
	}
	if needs.TrainingOperator {
		to, err := dir("trainingoperator")
		if err != nil {
			return nil, err
		}
		t.TrainingOperator, t.TrainingOperatorConfig = filepath.Join(to, "bin/training-operator"), filepath.Join(to, "config")
	}
	if needs.Trainer {
		tr, err := dir("trainer")
		if err != nil {
			return nil, err
		}
		t.Trainer, t.TrainerConfig = filepath.Join(tr, "bin/trainer"), filepath.Join(tr, "config")
	}
	if needs.Fluid {
		fl, err := dir("fluid")
		if err != nil {
			return nil, err
		}
		t.FluidCRDs = filepath.Join(fl, "crds")
	}
	for _, p := range []string{t.APIServer, t.ControllerManager, t.Scheduler, t.Etcd, t.Kwok, t.Kueue, t.Kubelet, t.Containerd, t.Ctr, t.Runc, t.CDIHook, t.JobSet, t.TrainingOperator, t.Trainer, t.FluidCRDs} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("toolchain reports its components cached but %s is missing (remove its folder to rebuild): %w", p, err)
		}
	}
	return t, nil
}

// buildBinary builds the command named like out (./cmd/<base name of out>) from the repository.
func buildBinary(ctx context.Context, progress io.Writer, repo, out string) error {
	name := filepath.Base(out)
	fmt.Fprintf(progress, "Building %s from %s\n", name, repo)
	// The version and commit the binaries report, as make build sets them, dated at the
	// commit (not now) so that go build leaves a binary of an unchanged tree in place.
	ldflags := buildinfo.LinkerFlags(buildinfo.FromGit(ctx, repo))
	cmd := exec.CommandContext(ctx, "go", "build", "-ldflags", ldflags, "-o", out, "./cmd/"+name)
	cmd.Dir = repo
	// go-nvml's C bindings use deprecated NVML declarations (as in the Makefile).
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "GOTOOLCHAIN=local", "CGO_CFLAGS=-Wno-deprecated-declarations")
	var stderr bytes.Buffer
	if err := runGroup(ctx, cmd, progress, &stderr); err != nil {
		return &ComponentError{Component: name + " build", Err: fmt.Errorf("go build ./cmd/%s: %w\n%s", name, err, stderr.String())}
	}
	return nil
}

// RepoRoot finds the gpudra repository at or above dir (the folder whose go.mod declares
// module github.com/gpudra/gpudra).
func RepoRoot(dir string) (string, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if data, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && bytes.Contains(data, []byte("module github.com/gpudra/gpudra\n")) {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("%s is not inside the gpudra repository (the lab builds gpudra-kubelet-plugin from it); run from the repository or pass a built plugin", dir)
		}
		d = parent
	}
}
