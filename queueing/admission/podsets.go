package admission

import (
	"context"
	"fmt"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/driver/allocation"
	"github.com/gpudra/gpudra/queueing/gang"
)

// Pod-set template annotations a user sets to ask for topology.
const (
	// AnnotationRequiredTopology keeps all pods of the pod set in one domain: block, rack or hostname.
	AnnotationRequiredTopology = "gpudra.dev/required-topology"
	// AnnotationSliceSize and AnnotationSliceTopology split the pod set into consecutive
	// slices of that many pods that must each share a domain (e.g. pipelines per rack).
	AnnotationSliceSize     = "gpudra.dev/slice-size"
	AnnotationSliceTopology = "gpudra.dev/slice-required-topology"
)

// badInput marks errors the user must fix (Rejected), as opposed to "not now" (Retry).
type badInput struct{ error }

// podSets turns a Workload's pod sets into gang pod sets, reading the pods' claim
// templates. Pods that use ResourceClaims directly (not templates) share them, which a
// gang placement cannot split: they are reported as bad input.
func podSets(ctx context.Context, c client.Reader, wl *kueue.Workload) ([]gang.PodSet, error) {
	var out []gang.PodSet
	for i, ps := range wl.Spec.PodSets {
		path := fmt.Sprintf("spec.podSets[%d] (%s)", i, ps.Name)
		set := gang.PodSet{Name: string(ps.Name), Count: int(ps.Count), NodeSelector: ps.Template.Spec.NodeSelector, Tolerations: ps.Template.Spec.Tolerations}
		ann := ps.Template.Annotations
		set.Required = ann[AnnotationRequiredTopology]
		if v, ok := ann[AnnotationSliceSize]; ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, badInput{fmt.Errorf("%s: annotation %s=%q: must be an integer", path, AnnotationSliceSize, v)}
			}
			set.SliceSize, set.SliceRequired = n, ann[AnnotationSliceTopology]
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
		if err := set.Validate(); err != nil {
			return nil, badInput{fmt.Errorf("%s: %w", path, err)}
		}
		out = append(out, set)
	}
	return out, nil
}
