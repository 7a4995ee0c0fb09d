package network

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/topology"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// Names of the objects this controller owns.
const (
	TopologyName = "gpudra"
	FlavorName   = "gpudra-topology"
	FileKey      = "topology.yaml"
)

// Reconciler labels nodes from the topology ConfigMap (when there is one) and keeps the
// Kueue Topology and ResourceFlavor in sync.
type Reconciler struct {
	Client client.Client
	Labels topology.LabelKeys
	// ConfigMap holding the topology file under key topology.yaml; empty name = labels only.
	ConfigMap types.NamespacedName
	// FlavorNodeLabels select the nodes of the topology-aware ResourceFlavor; Kueue requires
	// at least one when a flavor names a topology, so without them no flavor is made.
	FlavorNodeLabels map[string]string
}

// SetupWithManager reconciles on any node change and, when there is a topology ConfigMap,
// on its changes (one global key). Without one, ConfigMaps are not watched at all.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: "network"}}}
	})
	b := ctrl.NewControllerManagedBy(mgr).Named("gpudra-network").Watches(&corev1.Node{}, all)
	if r.ConfigMap.Name != "" {
		ours := predicate.NewPredicateFuncs(func(o client.Object) bool { return client.ObjectKeyFromObject(o) == r.ConfigMap })
		b = b.Watches(&corev1.ConfigMap{}, all, builder.WithPredicates(ours))
	}
	return b.Complete(r)
}

// Reconcile brings node labels, the Topology and the ResourceFlavor in line.
func (r *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	if r.ConfigMap.Name != "" {
		if err := r.labelNodes(ctx); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, r.syncKueue(ctx)
}

func (r *Reconciler) labelNodes(ctx context.Context) error {
	var cm corev1.ConfigMap
	if err := r.Client.Get(ctx, r.ConfigMap, &cm); err != nil {
		return client.IgnoreNotFound(err)
	}
	f, err := ParseFile([]byte(cm.Data[FileKey]))
	if err != nil {
		log.FromContext(ctx).Error(err, "Ignoring the topology ConfigMap", "configMap", r.ConfigMap)
		return nil // a bad file is reported, not retried in a hot loop; node labels stay as they are
	}
	for node, want := range f.Labels(r.Labels.Block, r.Labels.Rack, r.Labels.ToR) {
		var n corev1.Node
		if err := r.Client.Get(ctx, types.NamespacedName{Name: node}, &n); err != nil {
			if apierrors.IsNotFound(err) {
				continue // listed before it joined
			}
			return err
		}
		patch := client.MergeFrom(n.DeepCopy())
		changed := false
		for k, v := range want {
			if n.Labels[k] != v {
				if n.Labels == nil {
					n.Labels = map[string]string{}
				}
				n.Labels[k], changed = v, true
			}
		}
		// A ratio the file no longer gives is no longer known.
		for _, k := range []string{api.LabelToROversubscription, api.LabelBlockOversubscription} {
			if _, has := n.Labels[k]; has && want[k] == "" {
				delete(n.Labels, k)
				changed = true
			}
		}
		if changed {
			if err := r.Client.Patch(ctx, &n, patch); err != nil {
				return fmt.Errorf("labelling node %s: %w", node, err)
			}
		}
	}
	return nil
}

// syncKueue creates or updates the Topology (block → rack → tor → hostname; without a ToR
// label key, block → rack → hostname) and, when node labels for it are configured, a
// ResourceFlavor that uses it.
func (r *Reconciler) syncKueue(ctx context.Context) error {
	levels := []kueue.TopologyLevel{{NodeLabel: r.Labels.Block}, {NodeLabel: r.Labels.Rack}}
	if r.Labels.ToR != "" {
		levels = append(levels, kueue.TopologyLevel{NodeLabel: r.Labels.ToR})
	}
	levels = append(levels, kueue.TopologyLevel{NodeLabel: topology.LabelHostname})
	var topo kueue.Topology
	err := r.Client.Get(ctx, types.NamespacedName{Name: TopologyName}, &topo)
	switch {
	case apierrors.IsNotFound(err):
		topo = kueue.Topology{ObjectMeta: metav1.ObjectMeta{Name: TopologyName}, Spec: kueue.TopologySpec{Levels: levels}}
		if err := r.Client.Create(ctx, &topo); err != nil {
			return err
		}
	case err != nil:
		return err
	case !sameLevels(topo.Spec.Levels, levels):
		// Topology levels are immutable in Kueue: replace the object.
		if err := r.Client.Delete(ctx, &topo); err != nil {
			return err
		}
		topo = kueue.Topology{ObjectMeta: metav1.ObjectMeta{Name: TopologyName}, Spec: kueue.TopologySpec{Levels: levels}}
		if err := r.Client.Create(ctx, &topo); err != nil {
			return err
		}
	}
	if len(r.FlavorNodeLabels) == 0 {
		return nil
	}
	var flavor kueue.ResourceFlavor
	err = r.Client.Get(ctx, types.NamespacedName{Name: FlavorName}, &flavor)
	if apierrors.IsNotFound(err) {
		flavor = kueue.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: FlavorName},
			Spec: kueue.ResourceFlavorSpec{NodeLabels: r.FlavorNodeLabels, TopologyName: ptr.To(kueue.TopologyReference(TopologyName))}}
		return r.Client.Create(ctx, &flavor)
	}
	return err
}

func sameLevels(a, b []kueue.TopologyLevel) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if a[k].NodeLabel != b[k].NodeLabel {
			return false
		}
	}
	return true
}
