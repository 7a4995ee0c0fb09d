package lab

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
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

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// The lab's local container images. No registry is reachable from a lab, so both are built
// from test/lab/probe and imported into each real node's containerd; pods use them with
// imagePullPolicy: Never.
const (
	// PauseImage is every real node's pod sandbox image.
	PauseImage = "gpudra.dev/lab/pause:v1"
	// ProbeImage prints what a container received from gpudra (see test/lab/probe).
	ProbeImage = "gpudra.dev/lab/probe:v1"
)

// containerdImageName is the index annotation `ctr images import` names an image by.
const containerdImageName = "io.containerd.image.name"

// buildImages builds the probe program and writes both images as one OCI image layout
// archive at out.
func buildImages(ctx context.Context, progress io.Writer, repo, out string) error {
	bin := filepath.Join(filepath.Dir(out), "gpudra-lab-probe")
	fmt.Fprintf(progress, "Building gpudra-lab-probe (the lab's container images) from %s\n", repo)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./test/lab/probe")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOTOOLCHAIN=local")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return &ComponentError{Component: "gpudra-lab-probe build", Err: fmt.Errorf("go build ./test/lab/probe: %w\n%s", err, msg)}
	}
	program, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	files := []layerFile{{Path: "probe", Mode: 0o755, Data: program}}
	return writeImageArchive(out, files, map[string]ocispec.ImageConfig{
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
// from this machine — as an OCI image layout archive at out, named GpudraImage.
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
	return writeImageArchive(out, files, map[string]ocispec.ImageConfig{
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

// writeImageArchive writes an OCI image layout archive holding one single-layer image per
// name (all sharing the layer with files), each with its config.
func writeImageArchive(out string, files []layerFile, configs map[string]ocispec.ImageConfig) error {
	layer, diffID, err := rootfsLayer(files)
	if err != nil {
		return err
	}
	blobs := map[digest.Digest][]byte{}
	put := func(mediaType string, data []byte) ocispec.Descriptor {
		d := digest.FromBytes(data)
		blobs[d] = data
		return ocispec.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(data))}
	}
	layerDesc := put(ocispec.MediaTypeImageLayerGzip, layer)
	platform := ocispec.Platform{OS: "linux", Architecture: runtime.GOARCH}
	index := ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex}
	created := time.Unix(0, 0).UTC()
	for _, name := range slices.Sorted(maps.Keys(configs)) {
		cfg, err := json.Marshal(ocispec.Image{
			Created:  &created,
			Platform: platform,
			Config:   configs[name],
			RootFS:   ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{diffID}},
		})
		if err != nil {
			return err
		}
		manifest, err := json.Marshal(ocispec.Manifest{
			Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
			Config: put(ocispec.MediaTypeImageConfig, cfg), Layers: []ocispec.Descriptor{layerDesc},
		})
		if err != nil {
			return err
		}
		desc := put(ocispec.MediaTypeImageManifest, manifest)
		desc.Platform = &platform
		desc.Annotations = map[string]string{containerdImageName: name, ocispec.AnnotationRefName: name}
		index.Manifests = append(index.Manifests, desc)
	}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return err
	}
	layoutJSON, _ := json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion})
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	add := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: created, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	err = add(ocispec.ImageLayoutFile, layoutJSON)
	if err == nil {
		err = add("index.json", indexJSON)
	}
	for _, d := range slices.Sorted(maps.Keys(blobs)) {
		if err == nil {
			err = add("blobs/sha256/"+d.Encoded(), blobs[d])
		}
	}
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// rootfsLayer is an image's only layer: the files, their folders, and the folders a
// container runtime mounts over. It returns the gzipped layer and the digest of its
// uncompressed tar (the diff ID).
func rootfsLayer(files []layerFile) ([]byte, digest.Digest, error) {
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
			return nil, "", err
		}
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.Path, Mode: f.Mode, Size: int64(len(f.Data)), Typeflag: tar.TypeReg, ModTime: mtime}); err != nil {
			return nil, "", err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, "", err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, "", err
	}
	diffID := digest.FromBytes(raw.Bytes())
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(raw.Bytes()); err != nil {
		return nil, "", err
	}
	if err := zw.Close(); err != nil {
		return nil, "", err
	}
	return gz.Bytes(), diffID, nil
}
