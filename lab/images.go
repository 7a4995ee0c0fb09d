package lab

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/gpudra/gpudra/internal/buildinfo"
	"github.com/gpudra/gpudra/internal/image"
	"github.com/gpudra/gpudra/internal/release"
)

// The lab's local container images. No registry is reachable from a lab, so both are built
// from lab/probe and imported into each real node's containerd; pods use them with
// imagePullPolicy: Never.
const (
	// PauseImage is every real node's pod sandbox image.
	PauseImage = "gpudra.dev/lab/pause:v1"
	// ProbeImage prints what a container received from gpudra (see lab/probe).
	ProbeImage = "gpudra.dev/lab/probe:v1"
)

// buildImages builds the probe program and writes both images as one image archive at
// out.
func buildImages(ctx context.Context, progress io.Writer, repo, out string) error {
	bin := filepath.Join(filepath.Dir(out), "gpudra-lab-probe")
	fmt.Fprintf(progress, "Building gpudra-lab-probe (the lab's container images) from %s\n", repo)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./lab/probe")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOTOOLCHAIN=local")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return &ComponentError{Component: "gpudra-lab-probe build", Err: fmt.Errorf("go build ./lab/probe: %w\n%s", err, msg)}
	}
	program, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	files := []image.File{{Path: "probe", Mode: 0o755, Data: program}}
	return image.WriteArchive(out, files, map[string]v1.Config{
		PauseImage: {Entrypoint: []string{"/probe", "pause"}, Env: []string{"PATH=/"}},
		// As CUDA images do; gpudra's CDI specs override it.
		ProbeImage: {Entrypoint: []string{"/probe", "report"}, Env: []string{"PATH=/", "NVIDIA_VISIBLE_DEVICES=all"}},
	})
}

// pluginImage is what the lab's kubelet plugin image is built from: the tree's version, read
// once per lab up, so that the chart's values and the image the real nodes import agree. Its
// name, the release's image of that version (internal/release), is kept in the lab's state
// (State.PluginImage): the chart's pods find it without a registry.
func (u *upper) pluginImage(ctx context.Context) buildinfo.Source {
	if u.pluginSource == nil {
		src := buildinfo.FromGit(ctx, u.opts.Repo)
		u.pluginSource = &src
		u.state.PluginImage = release.Plugin.Ref(release.DefaultRegistry, buildinfo.ChartVersion(src.Version))
	}
	return *u.pluginSource
}

// buildPluginImage builds gpudra-kubelet-plugin from src as a release does (but for the
// paths it keeps) and writes its image (the binary and the C libraries it loads from this
// machine) as an image archive at out, named State.PluginImage.
func (u *upper) buildPluginImage(ctx context.Context, out string) error {
	dir, err := os.MkdirTemp("", "gpudra-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	src := u.pluginImage(ctx)
	fmt.Fprintf(u.out, "Building %s from %s\n", u.state.PluginImage, u.opts.Repo)
	// Without -trimpath, so that it reuses every package the lab's own build of the binaries
	// compiled a moment ago: with trimmed paths it shares none of them, and on empty caches
	// the step that builds the lab's images took 5.7 minutes.
	b := release.Builder{Repo: u.opts.Repo, Source: src, Registry: release.DefaultRegistry, Work: dir, KeepPaths: true}
	if _, err := b.Image(ctx, release.Plugin, out); err != nil {
		return &ComponentError{Component: "gpudra-kubelet-plugin image", Err: err}
	}
	return nil
}
