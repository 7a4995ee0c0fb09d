// Command release makes a gpudra release offline, without a container engine: the server
// binaries stamped with the version, their images as image archives, an SPDX SBOM per image
// and the packaged Helm chart, under _output/release/<version>/ (see docs/release.md). Run
// it from the repository with make release.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/gpudra/gpudra/internal/release"
)

func main() {
	var o release.Options
	flag.StringVar(&o.Repo, "repo", ".", "the gpudra repository")
	flag.StringVar(&o.Out, "out", "_output/release", "the folder the release goes under, in <version>/")
	flag.StringVar(&o.Version, "version", "", "the release's version, a semantic version (default: from git describe --tags --always --dirty)")
	flag.StringVar(&o.Registry, "registry", release.DefaultRegistry, "the images' registry and path: each is <registry>/<binary>:<version without v>")
	flag.StringVar(&o.CABundle, "ca-bundle", "", "PEM file of the CA certificates the images carry (default: this machine's)")
	flag.Parse()
	o.Progress = os.Stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	r, err := release.Make(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
	fmt.Printf("gpudra %s in %s:\n", r.Version, r.Dir)
	for _, img := range release.Images {
		fmt.Printf("  %s\n    image archive %s\n    SBOM %s\n", img.Ref(o.Registry, r.Tag), r.Images[img.Binary], r.SBOMs[img.Binary])
	}
	fmt.Printf("  chart %s\n", r.Chart)
}
