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
	return writeImageArchive(out, program, map[string][]string{
		PauseImage: {"/probe", "pause"},
		ProbeImage: {"/probe", "report"},
	})
}

// writeImageArchive writes an OCI image layout archive holding one single-layer image per
// name, each running program (at /probe) with its entrypoint.
func writeImageArchive(out string, program []byte, entrypoints map[string][]string) error {
	layer, diffID, err := rootfsLayer(program)
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
	for _, name := range slices.Sorted(maps.Keys(entrypoints)) {
		cfg, err := json.Marshal(ocispec.Image{
			Created:  &created,
			Platform: platform,
			Config:   ocispec.ImageConfig{Entrypoint: entrypoints[name], Env: []string{"PATH=/"}},
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

// rootfsLayer is the images' only layer: /probe and the folders a container runtime mounts
// over. It returns the gzipped layer and the digest of its uncompressed tar (the diff ID).
func rootfsLayer(program []byte) ([]byte, digest.Digest, error) {
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	mtime := time.Unix(0, 0)
	for _, dir := range []string{"dev", "proc", "sys", "etc", "tmp", "run", "var"} {
		if err := tw.WriteHeader(&tar.Header{Name: dir + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: mtime}); err != nil {
			return nil, "", err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: "probe", Mode: 0o755, Size: int64(len(program)), Typeflag: tar.TypeReg, ModTime: mtime}); err != nil {
		return nil, "", err
	}
	if _, err := tw.Write(program); err != nil {
		return nil, "", err
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
