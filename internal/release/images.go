package release

import (
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/gpudra/gpudra/internal/image"
)

// DefaultRegistry is where gpudra's images are published: each is <registry>/<binary>:<tag>,
// the names the Helm chart's image.registry default gives.
const DefaultRegistry = "ghcr.io/gpudra"

// Image is one image of a release: the binary cmd/<Binary> at /usr/bin/<Binary>, its
// entrypoint, in an image named after it.
type Image struct {
	Binary string
	// CGO builds the binary with cgo, and the image carries the C libraries it loads; else it
	// is static, on the base alone.
	CGO bool
	// User is the uid:gid the image runs as.
	User string
}

// The release's images. gpudra-kubelet-plugin uses cgo (go-nvml loads libnvidia-ml.so with
// dlopen) and runs as root: it writes CDI specs and its checkpoint under host paths and
// opens the GPUs' device files. The controller and the scheduler link no C code and run as
// nonroot, as the chart's pods ask (runAsUser 65532).
var (
	Plugin     = Image{Binary: "gpudra-kubelet-plugin", CGO: true, User: image.RootUser}
	Controller = Image{Binary: "gpudra-controller", User: image.NonrootUser}
	Scheduler  = Image{Binary: "gpudra-scheduler", User: image.NonrootUser}
)

// Images are every image a release writes.
var Images = []Image{Plugin, Controller, Scheduler}

// Ref is the image's name in registry with tag.
func (i Image) Ref(registry, tag string) string { return registry + "/" + i.Binary + ":" + tag }

// Path is where the binary is in the image.
func (i Image) Path() string { return "/usr/bin/" + i.Binary }

// Config is the image's configuration: its binary as entrypoint, run as User.
func (i Image) Config() v1.Config {
	return v1.Config{
		Entrypoint: []string{i.Path()},
		User:       i.User,
		Env:        []string{"PATH=/usr/bin:/bin"},
		Labels: map[string]string{
			"org.opencontainers.image.source":   "https://github.com/gpudra/gpudra",
			"org.opencontainers.image.licenses": "Apache-2.0",
			"org.opencontainers.image.title":    i.Binary,
		},
	}
}
