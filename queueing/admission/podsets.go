package admission

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/locality"
	"github.com/gpudra/gpudra/queueing/gang"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// Pod-set template annotations a user sets to ask for topology.

// badInput marks errors the user must fix (Rejected), as opposed to "not now" (Retry).
type badInput struct{ error }

// podSets turns a Workload's pod sets into gang pod sets, reading the pods' claim
// templates and the claim kube-scheduler makes for their DRA-backed extended resources
// (extended.go). Pods that use ResourceClaims directly (not templates) share them, which a
// gang placement cannot split: they are reported as bad input. The node labels and
// tolerations of the ResourceFlavors Kueue assigned are added to the pods' own, as Kueue
// adds them to the pods when it admits the workload.
func podSets(ctx context.Context, c client.Reader, wl *kueue.Workload) ([]gang.PodSet, error) {
	var out []gang.PodSet
	extended := &extendedClasses{c: c}
	for i, ps := range wl.Spec.PodSets {
		path := fmt.Sprintf("spec.podSets[%d] (%s)", i, ps.Name)
		set := gang.PodSet{Name: string(ps.Name), Count: int(ps.Count), NodeSelector: ps.Template.Spec.NodeSelector, Tolerations: ps.Template.Spec.Tolerations}
		if err := addFlavors(ctx, c, wl, &set); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		ann := ps.Template.Annotations
		set.Required = ann[api.AnnotationRequiredTopology]
		var err error
		if set.SliceSize, err = sizeAnnotation(ann, api.AnnotationSliceSize); err != nil {
			return nil, badInput{fmt.Errorf("%s: %w", path, err)}
		}
		set.SliceRequired, set.SliceNetwork = ann[api.AnnotationSliceTopology], ann[api.AnnotationSliceNetworkTopology]
		if set.SubsliceSize, err = sizeAnnotation(ann, api.AnnotationSubsliceSize); err != nil {
			return nil, badInput{fmt.Errorf("%s: %w", path, err)}
		}
		set.SubsliceRequired, set.SubsliceNetwork = ann[api.AnnotationSubsliceTopology], ann[api.AnnotationSubsliceNetworkTopology]
		if set.Data, err = locality.Needs(wl.Namespace, ann, &ps.Template.Spec, readerVolumes{ctx, c}); err != nil {
			if isLookup(err) {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			return nil, badInput{fmt.Errorf("%s: %w", path, err)}
		}
		for _, rc := range ps.Template.Spec.ResourceClaims {
			if rc.ResourceClaimTemplateName == nil {
				return nil, badInput{fmt.Errorf("%s: resourceClaim %s names a shared ResourceClaim; gang placement needs per-pod ResourceClaimTemplates", path, rc.Name)}
			}
			var tmpl resourceapi.ResourceClaimTemplate
			if err := c.Get(ctx, types.NamespacedName{Namespace: wl.Namespace, Name: *rc.ResourceClaimTemplateName}, &tmpl); err != nil {
				return nil, fmt.Errorf("%s: ResourceClaimTemplate %s: %w", path, *rc.ResourceClaimTemplateName, err)
			}
			spec := *tmpl.Spec.Spec.DeepCopy()
			allocation.Default(&spec)
			set.Claims = append(set.Claims, spec)
		}
		spec, err := extended.claim(ctx, &ps.Template.Spec)
		var bad badInput
		switch {
		case errors.As(err, &bad):
			return nil, badInput{fmt.Errorf("%s: %w", path, err)}
		case err != nil:
			return nil, fmt.Errorf("%s: %w", path, err)
		case spec != nil:
			set.Claims = append(set.Claims, *spec)
		}
		if err := set.Validate(); err != nil {
			return nil, badInput{fmt.Errorf("%s: %w", path, err)}
		}
		out = append(out, set)
	}
	return out, nil
}

// sizeAnnotation reads a slice size annotation (0 when absent).
func sizeAnnotation(ann map[string]string, key string) (int, error) {
	v, ok := ann[key]
	if !ok {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("annotation %s=%q: must be an integer of at least 1", key, v)
	}
	return n, nil
}

// addFlavors adds the node labels and tolerations of the ResourceFlavors assigned to the
// pod set. A flavor that no longer exists adds nothing.
func addFlavors(ctx context.Context, c client.Reader, wl *kueue.Workload, set *gang.PodSet) error {
	if wl.Status.Admission == nil {
		return nil
	}
	var names []string
	for _, a := range wl.Status.Admission.PodSetAssignments {
		if string(a.Name) != set.Name {
			continue
		}
		for _, f := range a.Flavors {
			names = append(names, string(f))
		}
	}
	slices.Sort(names)
	for _, name := range slices.Compact(names) {
		var rf kueue.ResourceFlavor
		if err := c.Get(ctx, types.NamespacedName{Name: name}, &rf); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return fmt.Errorf("ResourceFlavor %s: %w", name, err)
		}
		if len(rf.Spec.NodeLabels) > 0 {
			selector := maps.Clone(set.NodeSelector)
			if selector == nil {
				selector = map[string]string{}
			}
			maps.Copy(selector, rf.Spec.NodeLabels)
			set.NodeSelector = selector
		}
		set.Tolerations = append(slices.Clip(set.Tolerations), rf.Spec.Tolerations...)
	}
	return nil
}

// PodSets reads a Workload's pod sets as the check plans them: claim templates, the claim
// for DRA-backed extended resources, topology annotations and the assigned flavors' node
// labels and tolerations.
func PodSets(ctx context.Context, c client.Reader, wl *kueue.Workload) ([]gang.PodSet, error) {
	return podSets(ctx, c, wl)
}

// readerVolumes are the claims and volumes read through the check's client.
type readerVolumes struct {
	ctx context.Context
	c   client.Reader
}

func (v readerVolumes) Claim(namespace, name string) (*corev1.PersistentVolumeClaim, error) {
	var pvc corev1.PersistentVolumeClaim
	if err := v.c.Get(v.ctx, types.NamespacedName{Namespace: namespace, Name: name}, &pvc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, volumeLookup{err}
	}
	return &pvc, nil
}

func (v readerVolumes) Volume(name string) (*corev1.PersistentVolume, error) {
	var pv corev1.PersistentVolume
	if err := v.c.Get(v.ctx, types.NamespacedName{Name: name}, &pv); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, volumeLookup{err}
	}
	return &pv, nil
}

// volumeLookup marks a failed read of a claim or volume (retried), as opposed to a
// malformed annotation (rejected).
type volumeLookup struct{ error }

func (e volumeLookup) Unwrap() error { return e.error }

func isLookup(err error) bool {
	var l volumeLookup
	return errors.As(err, &l)
}

// Volumes are the claims and volumes read through c, for locality.Needs: the Fluid volumes a
// Workload's pods mount.
func Volumes(ctx context.Context, c client.Reader) locality.Volumes { return readerVolumes{ctx, c} }
