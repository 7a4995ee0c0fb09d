package image

import (
	"archive/tar"
	"io"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The archive holds every named image with its own entrypoint over one shared layer that
// carries the files and the folders a runtime mounts over, for this machine's platform.
func TestImageArchiveHoldsEachNamedImageWithItsFiles(t *testing.T) {
	out := filepath.Join(t.TempDir(), "images.tar")
	files := []File{{Path: "usr/bin/probe", Mode: 0o755, Data: []byte("#!/bin/sh\n")}}
	configs := map[string]v1.Config{
		"example.com/pause:v1": {Entrypoint: []string{"/usr/bin/probe", "pause"}},
		"example.com/probe:v1": {Entrypoint: []string{"/usr/bin/probe", "report"}, Env: []string{"NVIDIA_VISIBLE_DEVICES=all"}},
	}
	if err := WriteArchive(out, files, configs); err != nil {
		t.Fatal(err)
	}
	var layers []v1.Hash
	for n, want := range configs {
		tag, err := name.NewTag(n)
		if err != nil {
			t.Fatal(err)
		}
		img, err := tarball.ImageFromPath(out, &tag)
		if err != nil {
			t.Fatalf("%s not in the archive: %v", n, err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(cf.Config.Entrypoint, want.Entrypoint) || !slices.Equal(cf.Config.Env, want.Env) {
			t.Errorf("%s: config %+v, want %+v", n, cf.Config, want)
		}
		if cf.OS != "linux" || cf.Architecture == "" {
			t.Errorf("%s: platform %s/%s", n, cf.OS, cf.Architecture)
		}
		ls, err := img.Layers()
		if err != nil || len(ls) != 1 {
			t.Fatalf("%s: layers %d, %v", n, len(ls), err)
		}
		d, _ := ls[0].DiffID()
		layers = append(layers, d)
		rc, err := ls[0].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		entries, modes := map[string]string{}, map[string]int64{}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(tr)
			entries[h.Name], modes[h.Name] = string(data), h.Mode
		}
		rc.Close()
		for _, dir := range []string{"dev/", "proc/", "sys/", "tmp/", "usr/", "usr/bin/"} {
			if _, ok := entries[dir]; !ok {
				t.Errorf("%s: layer lacks %s", n, dir)
			}
		}
		if modes["tmp/"] != 0o1777 {
			t.Errorf("%s: tmp/ has mode %o, want 1777 (writable by a non-root user)", n, modes["tmp/"])
		}
		if entries["usr/bin/probe"] != "#!/bin/sh\n" {
			t.Errorf("%s: usr/bin/probe is %q", n, entries["usr/bin/probe"])
		}
	}
	if layers[0] != layers[1] {
		t.Errorf("the images do not share their layer: %v", layers)
	}
}
