package release

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/gpudra/gpudra/internal/buildinfo"
	"github.com/gpudra/gpudra/internal/image"
)

// Builder builds a release's binaries and images from a gpudra repository.
type Builder struct {
	// Repo is the repository's root; Source what the binaries report (buildinfo.Get).
	Repo   string
	Source buildinfo.Source
	// Registry is the images' registry and path (DefaultRegistry).
	Registry string
	// Work is a folder for the binaries.
	Work string
	// CABundle is the PEM file of CA certificates the images carry; empty: this machine's.
	CABundle string
	// KeepPaths builds without -trimpath, so that the build reuses every package a plain
	// go build of the tree (make build, the lab's) compiled: the lab's own image, built
	// after those, then only links. A release trims the paths.
	KeepPaths bool
}

// Tag is the images' tag and the chart's version: the release's version without its v.
func (b Builder) Tag() string { return buildinfo.ChartVersion(b.Source.Version) }

// Contents is what went into an image, for its SBOM.
type Contents struct {
	Image Image
	Ref   string
	// Binary is the built binary; Libraries the C libraries copied from this machine
	// (absolute paths there and in the image); CABundle the CA certificates' source.
	Binary    string
	Libraries []string
	CABundle  string
	// Files are the image's files, the binary's included.
	Files []image.File
}

// Binary builds img's binary into Work with the version stamped and returns its path.
func (b Builder) Binary(ctx context.Context, img Image) (string, error) {
	out := filepath.Join(b.Work, img.Binary)
	cgo := map[bool]string{true: "1", false: "0"}[img.CGO]
	// Without the symbol table and DWARF (-s -w): a third of the size; panics still name
	// functions and lines, and the build information (go version -m) stays.
	args := []string{"build", "-trimpath"}
	if b.KeepPaths {
		args = args[:1]
	}
	args = append(args, "-ldflags", "-s -w "+buildinfo.LinkerFlags(b.Source), "-o", out, "./cmd/"+img.Binary)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = b.Repo
	// go-nvml's C bindings use deprecated NVML declarations (as in the Makefile).
	cmd.Env = append(os.Environ(), "CGO_ENABLED="+cgo, "GOTOOLCHAIN=local", "CGO_CFLAGS=-Wno-deprecated-declarations")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/%s (CGO_ENABLED=%s): %w\n%s", img.Binary, cgo, err, stderr.String())
	}
	return out, nil
}

// Image builds img's binary and writes its image as an image archive (docker save's format)
// at out, named img.Ref(Registry, Tag()): the base (image.Base), the binary, and for a cgo
// binary the C libraries it loads, from this machine.
func (b Builder) Image(ctx context.Context, img Image, out string) (Contents, error) {
	c := Contents{Image: img, Ref: img.Ref(b.Registry, b.Tag())}
	base, ca, err := image.Base(b.CABundle)
	if err != nil {
		return c, fmt.Errorf("%s: %w", c.Ref, err)
	}
	c.CABundle = ca
	if c.Binary, err = b.Binary(ctx, img); err != nil {
		return c, err
	}
	data, err := os.ReadFile(c.Binary)
	if err != nil {
		return c, err
	}
	c.Files = append(base, image.File{Path: img.Path()[1:], Mode: 0o755, Data: data})
	if img.CGO {
		if c.Libraries, err = image.Libraries(c.Binary); err != nil {
			return c, fmt.Errorf("%s: %w", c.Ref, err)
		}
		libs, err := image.HostFiles(c.Libraries)
		if err != nil {
			return c, fmt.Errorf("%s: %w", c.Ref, err)
		}
		c.Files = append(c.Files, libs...)
	} else if libs, err := image.Libraries(c.Binary); err != nil || len(libs) > 0 {
		return c, fmt.Errorf("%s: %s should be static (CGO_ENABLED=0) but loads %v (%v)", c.Ref, img.Binary, libs, err)
	}
	if err := image.WriteArchive(out, c.Files, map[string]v1.Config{c.Ref: img.Config()}); err != nil {
		return c, err
	}
	return c, nil
}
