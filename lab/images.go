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

// PluginImage is the name of the kubelet plugin's image the lab builds from the gpudra
// repository at repo: the release's image for the tree's version (internal/release), which
// the lab's chart values name, so that the chart's pods find it without a registry.
func PluginImage(ctx context.Context, repo string) string {
	return release.Plugin.Ref(release.DefaultRegistry, pluginImageTag(ctx, repo))
}

// pluginImageTag is PluginImage's tag: the tree's version as a release writes it.
func pluginImageTag(ctx context.Context, repo string) string {
	return buildinfo.ChartVersion(buildinfo.FromGit(ctx, repo).Version)
}

// BuildPluginImage builds gpudra-kubelet-plugin as a release does and writes its image (the
// binary and the C libraries it loads from this machine) as an image archive at out, named
// PluginImage.
func BuildPluginImage(ctx context.Context, progress io.Writer, repo, out string) error {
	dir, err := os.MkdirTemp("", "gpudra-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Fprintf(progress, "Building %s from %s\n", PluginImage(ctx, repo), repo)
	b := release.Builder{Repo: repo, Source: buildinfo.FromGit(ctx, repo), Registry: release.DefaultRegistry, Work: dir}
	if _, err := b.Image(ctx, release.Plugin, out); err != nil {
		return &ComponentError{Component: "gpudra-kubelet-plugin image", Err: err}
	}
	return nil
}
