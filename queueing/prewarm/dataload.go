package prewarm

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/locality"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// DataLoadResource is Fluid's DataLoad kind, used unstructured (gpudra does not import
// Fluid's API).
var DataLoadResource = schema.GroupVersionResource{Group: "data.fluid.io", Version: "v1alpha1", Resource: "dataloads"}

// LabelDataset carries, on a DataLoad gpudra made, the dataset's name; api.LabelWorkload
// carries the Workload's UID.
const LabelDataset = "gpudra.dev/dataset"

// maxNameLen keeps a DataLoad's name usable as the name of the Job and Helm release Fluid
// makes for it.
const maxNameLen = 52

// DataLoadName is the DataLoad of a Workload and a dataset: the dataset's name and a hash of
// the Workload's UID and the dataset, the same on every reconcile.
func DataLoadName(wl *kueue.Workload, d locality.Dataset) string {
	sum := sha256.Sum256([]byte(string(wl.UID) + "/" + d.String()))
	suffix := "-prewarm-" + hex.EncodeToString(sum[:])[:10]
	return truncate(d.Name, maxNameLen-len(suffix)) + suffix
}

// truncate cuts a DNS name to at most n characters, ending in a letter or digit.
func truncate(name string, n int) string {
	if len(name) > n {
		name = name[:n]
	}
	return strings.TrimRight(name, "-.")
}

// DataLoad is the DataLoad that warms d for wl: in the dataset's namespace (Fluid's rule,
// which is the Workload's: only those are made), owned by the Workload so that it goes
// with it, loading the whole dataset.
func DataLoad(wl *kueue.Workload, d locality.Dataset) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": DataLoadResource.GroupVersion().String(),
		"kind":       "DataLoad",
		"metadata": map[string]any{
			"name":      DataLoadName(wl, d),
			"namespace": d.Namespace,
			"labels": map[string]any{
				api.LabelWorkload: string(wl.UID),
				LabelDataset:      labelValue(d.Name),
			},
			"ownerReferences": []any{map[string]any{
				"apiVersion": kueue.SchemeGroupVersion.String(),
				"kind":       "Workload",
				"name":       wl.Name,
				"uid":        string(wl.UID),
			}},
		},
		"spec": map[string]any{
			"dataset": map[string]any{"name": d.Name, "namespace": d.Namespace},
		},
	}}
	return u
}

// labelValue is a dataset name as a label value (at most 63 characters).
func labelValue(name string) string { return truncate(name, 63) }
