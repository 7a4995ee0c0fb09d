package release

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/gpudra/gpudra/internal/buildinfo"
)

// Options say what release to make and where.
type Options struct {
	// Repo is the gpudra repository's root; Out the folder the release goes under
	// (<Out>/<tag>/).
	Repo, Out string
	// Version overrides the version of the repository's git description (any semantic
	// version, buildinfo.ParseVersion).
	Version string
	// Registry names the images (DefaultRegistry); CABundle the CA certificates the
	// images carry (empty: this machine's).
	Registry, CABundle string
	Progress           io.Writer
}

// Result is what a release wrote.
type Result struct {
	// Version is the release's version (v1.2.3), Tag the images' tag and the chart's
	// version (1.2.3); Dir the folder it is in.
	Version, Tag, Dir string
	// Binaries, Images (image archives) and SBOMs by binary; Chart the packaged chart.
	Binaries, Images, SBOMs map[string]string
	Chart                   string
}

// Make makes a release: under <Out>/<tag>/ the binaries (bin/), each image as an image
// archive (images/<binary>.tar), its SBOM (sbom/<binary>.spdx.json) and the chart
// (gpudra-<tag>.tgz), all of one version.
func Make(ctx context.Context, o Options) (Result, error) {
	src := buildinfo.FromGit(ctx, o.Repo)
	if o.Version != "" {
		v, err := buildinfo.ParseVersion(o.Version)
		if err != nil {
			return Result{}, fmt.Errorf("VERSION: %w", err)
		}
		src.Version = v
	}
	if o.Registry == "" {
		o.Registry = DefaultRegistry
	}
	b := Builder{Repo: o.Repo, Source: src, Registry: o.Registry, CABundle: o.CABundle}
	r := Result{Version: src.Version, Tag: b.Tag(), Dir: filepath.Join(o.Out, b.Tag()),
		Binaries: map[string]string{}, Images: map[string]string{}, SBOMs: map[string]string{}}
	b.Work = filepath.Join(r.Dir, "bin")
	for _, d := range []string{b.Work, filepath.Join(r.Dir, "images"), filepath.Join(r.Dir, "sbom")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return r, err
		}
	}
	created := time.Now()
	if t, err := time.Parse(time.RFC3339, src.Date); err == nil {
		created = t // the commit's date: one tree, one SBOM
	}
	for _, img := range Images {
		fmt.Fprintf(o.Progress, "Building %s\n", img.Ref(o.Registry, b.Tag()))
		archive := filepath.Join(r.Dir, "images", img.Binary+".tar")
		c, err := b.Image(ctx, img, archive)
		if err != nil {
			return r, err
		}
		r.Binaries[img.Binary], r.Images[img.Binary] = c.Binary, archive
		doc, err := SBOM(c, src.Version, created)
		if err != nil {
			return r, err
		}
		r.SBOMs[img.Binary] = filepath.Join(r.Dir, "sbom", img.Binary+".spdx.json")
		if err := writeFile(r.SBOMs[img.Binary], func(w io.Writer) error { return WriteSBOM(w, doc) }); err != nil {
			return r, err
		}
	}
	fmt.Fprintf(o.Progress, "Packaging the chart %s\n", ChartDir)
	chart, err := PackageChart(filepath.Join(o.Repo, ChartDir), b.Tag(), r.Dir)
	if err != nil {
		return r, err
	}
	r.Chart = chart
	return r, nil
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}
