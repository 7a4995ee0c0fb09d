package locality

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corelisters "k8s.io/client-go/listers/core/v1"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// Need is one dataset a pod reads and the node labels that mark a node caching it: a node
// carrying any of Keys caches it.
type Need struct {
	Dataset Dataset
	Keys    []string
}

// Volumes looks up claims and volumes; a missing object is nil without error.
type Volumes interface {
	Claim(namespace, name string) (*corev1.PersistentVolumeClaim, error)
	Volume(name string) (*corev1.PersistentVolume, error)
}

// Listers are Volumes read from informers' listers.
func Listers(claims corelisters.PersistentVolumeClaimLister, volumes corelisters.PersistentVolumeLister) Volumes {
	return listers{claims, volumes}
}

type listers struct {
	claims  corelisters.PersistentVolumeClaimLister
	volumes corelisters.PersistentVolumeLister
}

func (l listers) Claim(namespace, name string) (*corev1.PersistentVolumeClaim, error) {
	c, err := l.claims.PersistentVolumeClaims(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return c, err
}

func (l listers) Volume(name string) (*corev1.PersistentVolume, error) {
	v, err := l.volumes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return v, err
}

// Needs is what a pod in namespace, with annotations and spec, reads: the datasets its
// gpudra.dev/datasets annotation names, and those behind the PersistentVolumeClaims it
// mounts that are bound to Fluid volumes. vols nil: claims are not looked at. A claim not
// found or not bound yet names no dataset (yet).
//
// A named dataset is cached on nodes with gpudra's label (LabelKey) or Fluid's
// (FluidKey, when it fits); a Fluid volume's dataset on nodes with the fluid.io/s- labels
// of the volume (the exact key Fluid uses, also when it is the dataset's UID) or with
// gpudra's label.
func Needs(namespace string, annotations map[string]string, spec *corev1.PodSpec, vols Volumes) ([]Need, error) {
	var out []Need
	add := func(d Dataset, keys ...string) { out = Merge(out, Need{Dataset: d, Keys: keys}) }
	if v, ok := annotations[api.AnnotationDatasets]; ok {
		ds, err := ParseAnnotation(v, namespace)
		if err != nil {
			return nil, err
		}
		for _, d := range ds {
			add(d, LabelKey(d))
			if k, ok := FluidKey(d); ok {
				add(d, k)
			}
		}
	}
	if vols == nil || spec == nil {
		return out, nil
	}
	for _, v := range spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		d, keys, err := fluidVolume(namespace, v.PersistentVolumeClaim.ClaimName, vols)
		if err != nil {
			return nil, err
		}
		if len(keys) > 0 {
			add(d, append([]string{LabelKey(d)}, keys...)...)
		}
	}
	return out, nil
}

// Merge adds each of more to needs and returns them: a dataset already there gains the
// cache label keys it lacked, so that a node carrying any key any of them names counts.
func Merge(needs []Need, more ...Need) []Need {
	for _, n := range more {
		i := slices.IndexFunc(needs, func(o Need) bool { return o.Dataset == n.Dataset })
		if i < 0 {
			needs = append(needs, Need{Dataset: n.Dataset})
			i = len(needs) - 1
		}
		for _, k := range n.Keys {
			if !slices.Contains(needs[i].Keys, k) {
				needs[i].Keys = append(needs[i].Keys, k)
			}
		}
	}
	return needs
}

// fluidVolume is the dataset behind claim and the cache labels its volume carries; no
// keys when the claim is not bound to a Fluid volume.
func fluidVolume(namespace, claim string, vols Volumes) (Dataset, []string, error) {
	pvc, err := vols.Claim(namespace, claim)
	if err != nil {
		return Dataset{}, nil, fmt.Errorf("PersistentVolumeClaim %s/%s: %w", namespace, claim, err)
	}
	if pvc == nil || pvc.Spec.VolumeName == "" {
		return Dataset{}, nil, nil
	}
	pv, err := vols.Volume(pvc.Spec.VolumeName)
	if err != nil {
		return Dataset{}, nil, fmt.Errorf("PersistentVolume %s of claim %s/%s: %w", pvc.Spec.VolumeName, namespace, claim, err)
	}
	if pv == nil || !isFluid(pv) {
		return Dataset{}, nil, nil
	}
	var keys []string
	for k := range pv.Labels {
		if strings.HasPrefix(k, FluidPrefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	// Fluid names the claim after its dataset, in the dataset's namespace.
	return Dataset{Namespace: namespace, Name: claim}, keys, nil
}

func isFluid(pv *corev1.PersistentVolume) bool {
	return pv.Spec.CSI != nil && pv.Spec.CSI.Driver == FluidCSIDriver || pv.Spec.StorageClassName == FluidStorageClass
}
