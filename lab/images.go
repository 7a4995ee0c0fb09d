package lab

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
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
	files := []layerFile{{Path: "probe", Mode: 0o755, Data: program}}
	return writeImageArchive(out, files, map[string]v1.Config{
		PauseImage: {Entrypoint: []string{"/probe", "pause"}, Env: []string{"PATH=/"}},
		// As CUDA images do; gpudra's CDI specs override it.
		ProbeImage: {Entrypoint: []string{"/probe", "report"}, Env: []string{"PATH=/", "NVIDIA_VISIBLE_DEVICES=all"}},
	})
}

// GpudraImage is the name the lab gives the gpudra image it builds: the Helm chart's default
// (ghcr.io/gpudra/gpudra:<appVersion>), so that the chart's pods find it without a registry.
const GpudraImage = "ghcr.io/gpudra/gpudra:0.1.0"

// gpudraBinaries are the programs of the gpudra image, in /usr/bin.
var gpudraBinaries = []string{"gpudra", "gpudra-kubelet-plugin", "gpudra-controller"}

// gpudraLibraries are the C libraries the image carries besides the binaries' own (ldd): the
// glibc parts NVIDIA's libnvidia-ml.so, loaded from the host's driver root, links against.
var gpudraLibraries = []string{"libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1"}

// BuildGpudraImage builds gpudra's binaries (with cgo: go-nvml loads libnvidia-ml.so with
// dlopen) and writes the gpudra image — the binaries in /usr/bin and the C libraries they need
// from this machine — as an image archive at out, named GpudraImage.
func BuildGpudraImage(ctx context.Context, progress io.Writer, repo, out string) error {
	dir, err := os.MkdirTemp("", "gpudra-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var files []layerFile
	libs := map[string]bool{}
	for _, name := range gpudraBinaries {
		bin := filepath.Join(dir, name)
		if err := buildBinary(ctx, progress, repo, bin); err != nil {
			return err
		}
		data, err := os.ReadFile(bin)
		if err != nil {
			return err
		}
		files = append(files, layerFile{Path: "usr/bin/" + name, Mode: 0o755, Data: data})
		deps, err := sharedLibraries(bin)
		if err != nil {
			return err
		}
		for _, l := range deps {
			libs[l] = true
		}
	}
	for l := range libs {
		for _, extra := range gpudraLibraries {
			if p := filepath.Join(filepath.Dir(l), extra); exists(p) {
				libs[p] = true
			}
		}
	}
	for _, l := range slices.Sorted(maps.Keys(libs)) {
		data, err := os.ReadFile(l) // follows the link to the library itself
		if err != nil {
			return fmt.Errorf("gpudra image: %w", err)
		}
		files = append(files, layerFile{Path: strings.TrimPrefix(l, "/"), Mode: 0o755, Data: data})
	}
	return writeImageArchive(out, files, map[string]v1.Config{
		GpudraImage: {Env: []string{"PATH=/usr/bin:/bin"}, Cmd: []string{"gpudra", "--help"}},
	})
}

// sharedLibraries lists the absolute paths of the shared libraries ldd says bin loads.
func sharedLibraries(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", bin, err)
	}
	var libs []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			libs = append(libs, f[2])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			libs = append(libs, f[0]) // the dynamic loader
		}
	}
	return libs, nil
}

// layerFile is a regular file of an image layer; its folders are made as needed.
type layerFile struct {
	Path string // relative to the image's root
	Mode int64
	Data []byte
}

// writeImageArchive writes an image archive (the `docker save` format, which `ctr images
// import` reads) holding one single-layer image per name, all sharing the layer with files,
// each with its config.
func writeImageArchive(out string, files []layerFile, configs map[string]v1.Config) error {
	raw, err := rootfsLayer(files)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil })
	if err != nil {
		return fmt.Errorf("image layer: %w", err)
	}
	base, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{OS: "linux", Architecture: runtime.GOARCH, Created: v1.Time{Time: time.Unix(0, 0).UTC()}})
	if err != nil {
		return err
	}
	if base, err = mutate.AppendLayers(base, layer); err != nil {
		return err
	}
	images := map[name.Reference]v1.Image{}
	for n, cfg := range configs {
		tag, err := name.NewTag(n, name.StrictValidation)
		if err != nil {
			return fmt.Errorf("image name %q: %w", n, err)
		}
		if images[tag], err = mutate.Config(base, cfg); err != nil {
			return err
		}
	}
	if err := tarball.MultiRefWriteToFile(out, images); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	return nil
}

// rootfsLayer is an image's only layer as an uncompressed tar: the files, their folders, and
// the folders a container runtime mounts over.
func rootfsLayer(files []layerFile) ([]byte, error) {
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	mtime := time.Unix(0, 0)
	dirs := map[string]bool{"dev": true, "proc": true, "sys": true, "etc": true, "tmp": true, "run": true, "var": true}
	for _, f := range files {
		for d := filepath.Dir(f.Path); d != "." && d != "/"; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	for _, dir := range slices.Sorted(maps.Keys(dirs)) { // parents sort before children
		if err := tw.WriteHeader(&tar.Header{Name: dir + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: mtime}); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.Path, Mode: f.Mode, Size: int64(len(f.Data)), Typeflag: tar.TypeReg, ModTime: mtime}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return raw.Bytes(), nil
}
