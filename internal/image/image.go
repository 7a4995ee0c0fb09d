package image

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"maps"
	"path"
	"runtime"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// File is a regular file of an image's root file system; its folders are made as needed.
type File struct {
	Path string // relative to the image's root, slash-separated
	Mode int64
	Data []byte
}

// epoch is the time every file and image is dated at, so that one input gives one image.
var epoch = time.Unix(0, 0).UTC()

// baseWith is the platform's empty image with files as its one layer.
func baseWith(files []File) (v1.Image, error) {
	raw, err := rootfsLayer(files)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil })
	if err != nil {
		return nil, fmt.Errorf("image layer: %w", err)
	}
	base, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{OS: "linux", Architecture: runtime.GOARCH, Created: v1.Time{Time: epoch}})
	if err != nil {
		return nil, err
	}
	return mutate.AppendLayers(base, layer)
}

// WriteArchive writes an image archive (the `docker save` format, which `ctr images import`
// and `docker load` read) holding one single-layer image per name, all sharing the layer
// with files, each with its config.
func WriteArchive(out string, files []File, configs map[string]v1.Config) error {
	base, err := baseWith(files)
	if err != nil {
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

// runtimeDirs are the folders a container runtime mounts over or expects.
var runtimeDirs = []string{"dev", "proc", "sys", "etc", "tmp", "run", "var"}

// rootfsLayer is an image's only layer as an uncompressed tar: the files, their folders, and
// the folders a container runtime mounts over (tmp writable by all, sticky, as on a host).
func rootfsLayer(files []File) ([]byte, error) {
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	dirs := map[string]bool{}
	for _, d := range runtimeDirs {
		dirs[d] = true
	}
	for _, f := range files {
		for d := path.Dir(f.Path); d != "." && d != "/"; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	for _, dir := range slices.Sorted(maps.Keys(dirs)) { // parents sort before children
		mode := int64(0o755)
		if dir == "tmp" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Name: dir + "/", Mode: mode, Typeflag: tar.TypeDir, ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.Path, Mode: f.Mode, Size: int64(len(f.Data)), Typeflag: tar.TypeReg, ModTime: epoch}); err != nil {
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
