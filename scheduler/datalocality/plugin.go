package datalocality

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/gpudra/gpudra/locality"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "DataLocality"

const stateKey fwk.StateKey = Name

// Plugin scores a node 0 to 100 by the share of the pod's datasets it caches. Datasets the
// pod's own preferred node affinity already favours (Fluid's webhook adds such a term,
// weight 100, for the nodes caching the datasets of the Fluid volumes a pod mounts) are not
// counted again: kube-scheduler's NodeAffinity plugin scores them.
type Plugin struct {
	volumes locality.Volumes
}

var (
	_ fwk.PreScorePlugin             = (*Plugin)(nil)
	_ fwk.ScorePlugin                = (*Plugin)(nil)
	_ fwk.SignPlugin                 = (*Plugin)(nil)
	_ frameworkruntime.PluginFactory = New
)

// New builds the plugin. It takes no args (its weight is the profile's); it reads claims
// and volumes through kube-scheduler's informers, which every scheduler may read.
func New(ctx context.Context, _ runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	f := h.SharedInformerFactory()
	if f == nil {
		return nil, fmt.Errorf("%s needs the scheduler's informer factory", Name)
	}
	core := f.Core().V1()
	p := &Plugin{volumes: locality.Listers(core.PersistentVolumeClaims().Lister(), core.PersistentVolumes().Lister())}
	klog.FromContext(ctx).V(2).Info("data locality scoring")
	return p, nil
}

func (*Plugin) Name() string { return Name }

type cycleState struct{ needs []locality.Need }

func (s *cycleState) Clone() fwk.StateData { return s }

// PreScore reads the pod's datasets once per cycle; a pod that reads none, or only
// datasets its own affinity already prefers, is skipped. A malformed gpudra.dev/datasets
// annotation is logged and the pod scored as reading none: a preference must never keep a
// pod from running.
func (p *Plugin) PreScore(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	needs, err := locality.Needs(pod.Namespace, pod.Annotations, &pod.Spec, p.volumes)
	if err != nil {
		klog.FromContext(ctx).Info("Pod's datasets not scored", "pod", klog.KObj(pod), "err", err)
		return fwk.NewStatus(fwk.Skip)
	}
	needs = locality.WithoutPreferred(&pod.Spec, needs)
	if len(needs) == 0 {
		return fwk.NewStatus(fwk.Skip)
	}
	cs.Write(stateKey, &cycleState{needs: needs})
	return nil
}

// Score is the share of the pod's datasets the node caches, 0 to 100.
func (p *Plugin) Score(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo) (int64, *fwk.Status) {
	data, err := cs.Read(stateKey)
	if err != nil {
		return 0, fwk.AsStatus(fmt.Errorf("%s: PreScore state: %w", Name, err))
	}
	return locality.Score(ni.Node().Labels, data.(*cycleState).needs, fwk.MaxNodeScore), nil
}

func (p *Plugin) ScoreExtensions() fwk.ScoreExtensions { return nil }

// signerName is the key of the plugin's signature fragment: what it scores a pod without
// volume claims by.
const signerName = "v1.Pod.Namespace+Annotations[gpudra.dev/datasets]+Spec.Affinity.NodeAffinity.Preferred.Keys().DataLocality()"

// SignPod lets kube-scheduler 1.37 reuse scores across pods that are alike (opportunistic
// batching; a Score plugin without it turns batching off for every pod): a pod is scored
// by its namespace (bare dataset names are in it), its gpudra.dev/datasets annotation and
// the keys its preferred node affinity names. A pod mounting PersistentVolumeClaims reads
// what they are bound to, which can change between pods, so it is not signable.
func (p *Plugin) SignPod(ctx context.Context, pod *corev1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil || v.Ephemeral != nil {
			return nil, fwk.NewStatus(fwk.Unschedulable, "pods with volume claims are not signable: their datasets depend on the volumes the claims are bound to")
		}
	}
	var keys []string
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		for _, t := range a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			for _, e := range t.Preference.MatchExpressions {
				keys = append(keys, e.Key)
			}
			for _, e := range t.Preference.MatchFields {
				keys = append(keys, e.Key)
			}
		}
	}
	slices.Sort(keys)
	value, named := pod.Annotations[api.AnnotationDatasets]
	return []fwk.SignFragment{{Key: signerName, Value: fmt.Sprintf("%s\x00%t\x00%s\x00%s", pod.Namespace, named, value, strings.Join(slices.Compact(keys), ","))}}, nil
}
