package locality

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// Dataset is a dataset by namespace and name (a Fluid Dataset's, or any name an admin's
// cache agent understands).
type Dataset struct {
	Namespace string
	Name      string
}

func (d Dataset) String() string { return d.Namespace + "/" + d.Name }

// FluidPrefix starts the node labels Fluid puts on the nodes caching a dataset.
const FluidPrefix = "fluid.io/s-"

// Fluid's CSI driver and storage class of the volumes of its datasets.
const (
	FluidCSIDriver    = "fuse.csi.fluid.io"
	FluidStorageClass = "fluid"
)

// labelHashLen is how many hex digits of the SHA-256 of "<namespace>/<name>" name a
// dataset whose plain label name would be too long.
const labelHashLen = 40

// LabelKey is gpudra's node label that marks a node caching d:
// dataset.gpudra.dev/<namespace>.<name>, or, when that name part would pass the 63
// characters a label name may have (or is not a valid one), dataset.gpudra.dev/sha256-
// followed by the first 40 hex digits of the SHA-256 of "<namespace>/<name>"
// (`gpudra explain` and docs/data.md show how to compute it).
func LabelKey(d Dataset) string {
	name := d.Namespace + "." + d.Name
	if len(validation.IsQualifiedName(api.LabelDatasetPrefix+name)) == 0 {
		return api.LabelDatasetPrefix + name
	}
	sum := sha256.Sum256([]byte(d.String()))
	return api.LabelDatasetPrefix + "sha256-" + hex.EncodeToString(sum[:])[:labelHashLen]
}

// FluidKey is the label Fluid puts on the nodes caching d, fluid.io/s-<namespace>-<name>,
// and false when that would pass 63 characters: Fluid then names the dataset by its UID,
// which only the dataset's PersistentVolume tells.
func FluidKey(d Dataset) (string, bool) {
	k := FluidPrefix + d.Namespace + "-" + d.Name
	return k, len(validation.IsQualifiedName(k)) == 0
}

// ParseAnnotation reads the gpudra.dev/datasets annotation of an object in namespace:
// datasets separated by commas, each <namespace>/<name> or <name> (in namespace). Spaces
// around entries are ignored; a dataset named twice counts once.
func ParseAnnotation(value, namespace string) ([]Dataset, error) {
	var out []Dataset
	seen := map[Dataset]bool{}
	for i, entry := range strings.Split(value, ",") {
		entry = strings.TrimSpace(entry)
		d, err := parseEntry(entry, namespace)
		if err != nil {
			return nil, fmt.Errorf("annotation %s, entry %d %q: %w; accepted form: a comma-separated list of <namespace>/<name> or <name>",
				api.AnnotationDatasets, i+1, entry, err)
		}
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out, nil
}

func parseEntry(entry, namespace string) (Dataset, error) {
	if entry == "" {
		return Dataset{}, fmt.Errorf("empty")
	}
	d := Dataset{Namespace: namespace, Name: entry}
	if ns, name, ok := strings.Cut(entry, "/"); ok {
		d = Dataset{Namespace: ns, Name: name}
	}
	if errs := validation.IsDNS1123Label(d.Namespace); len(errs) > 0 {
		return Dataset{}, fmt.Errorf("namespace %q: %s", d.Namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(d.Name); len(errs) > 0 {
		return Dataset{}, fmt.Errorf("name %q: %s", d.Name, strings.Join(errs, "; "))
	}
	return d, nil
}
