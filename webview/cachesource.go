package webview

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// Cache is what the view needs of a controller-runtime cache, such as a manager's
// GetCache(): the view reads through it and keeps no objects of its own.
type Cache interface {
	client.Reader
	GetInformer(ctx context.Context, obj client.Object, opts ...crcache.InformerGetOption) (crcache.Informer, error)
}

// kueueKinds are the typed objects and lists of KueueResources, for a Cache.
var kueueKinds = map[schema.GroupVersionResource]struct {
	obj  client.Object
	new  func() client.Object
	list func() client.ObjectList
}{
	clusterQueuesGVR:   {&kueue.ClusterQueue{}, func() client.Object { return &kueue.ClusterQueue{} }, func() client.ObjectList { return &kueue.ClusterQueueList{} }},
	cohortsGVR:         {&kueue.Cohort{}, func() client.Object { return &kueue.Cohort{} }, func() client.ObjectList { return &kueue.CohortList{} }},
	localQueuesGVR:     {&kueue.LocalQueue{}, func() client.Object { return &kueue.LocalQueue{} }, func() client.ObjectList { return &kueue.LocalQueueList{} }},
	workloadsGVR:       {&kueue.Workload{}, func() client.Object { return &kueue.Workload{} }, func() client.ObjectList { return &kueue.WorkloadList{} }},
	admissionChecksGVR: {&kueue.AdmissionCheck{}, func() client.Object { return &kueue.AdmissionCheck{} }, func() client.ObjectList { return &kueue.AdmissionCheckList{} }},
}

// typedKueue is an informer transform that stores Kueue's objects typed, converted once
// as they arrive rather than on every page. Anything else (a tombstone, say) passes as
// it is.
func typedKueue(gvr schema.GroupVersionResource) toolscache.TransformFunc {
	return func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil
		}
		typed := kueueKinds[gvr].new()
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, typed); err != nil {
			return nil, fmt.Errorf("webview: reading %s %s/%s: %w", gvr.Resource, u.GetNamespace(), u.GetName(), err)
		}
		return typed, nil
	}
}

// cacheSource reads a controller-runtime cache that its owner starts.
type cacheSource struct {
	c Cache
	// jobs: the cache holds batch/v1 Jobs (Options.CacheHasJobs).
	jobs     bool
	kueueInf map[schema.GroupVersionResource]crcache.Informer
}

func (s *cacheSource) start(ctx context.Context, changed func()) error {
	logger := klog.FromContext(ctx)
	handler := eventHandler(changed)
	watched := []client.Object{&corev1.Node{}, &corev1.Pod{}, &resourceapi.ResourceSlice{}, &resourceapi.ResourceClaim{}, &resourceapi.DeviceClass{}}
	if s.jobs {
		watched = append(watched, &batchv1.Job{})
	}
	for _, obj := range watched {
		inf, err := s.c.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("webview: watching %T: %w", obj, err)
		}
		if _, err := inf.AddEventHandler(handler); err != nil {
			return err
		}
		if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			return fmt.Errorf("webview: the %T cache did not fill", obj)
		}
	}
	s.kueueInf = map[schema.GroupVersionResource]crcache.Informer{}
	for _, gvr := range KueueResources {
		// Kueue's objects are not required: the queues page names those not read.
		inf, err := s.c.GetInformer(ctx, kueueKinds[gvr].obj, crcache.BlockUntilSynced(false))
		if err != nil {
			logger.Info("Kueue objects not read; the queues page goes without them", "resource", gvr.Resource, "err", err)
			continue
		}
		if _, err := inf.AddEventHandler(handler); err != nil {
			return err
		}
		s.kueueInf[gvr] = inf
	}
	return nil
}

// listCache lists one kind from the cache without copying its objects (the view only reads).
func listCache[T any, L client.ObjectList](ctx context.Context, c client.Reader, l L, items func(L) []T) ([]*T, error) {
	if err := c.List(ctx, l, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	it := items(l)
	out := make([]*T, len(it))
	for k := range it {
		out[k] = &it[k]
	}
	return out, nil
}

func (s *cacheSource) nodes(ctx context.Context) ([]*corev1.Node, error) {
	return listCache(ctx, s.c, &corev1.NodeList{}, func(l *corev1.NodeList) []corev1.Node { return l.Items })
}

func (s *cacheSource) pods(ctx context.Context) ([]*corev1.Pod, error) {
	return listCache(ctx, s.c, &corev1.PodList{}, func(l *corev1.PodList) []corev1.Pod { return l.Items })
}

func (s *cacheSource) slices(ctx context.Context) ([]*resourceapi.ResourceSlice, error) {
	return listCache(ctx, s.c, &resourceapi.ResourceSliceList{}, func(l *resourceapi.ResourceSliceList) []resourceapi.ResourceSlice { return l.Items })
}

func (s *cacheSource) claims(ctx context.Context) ([]*resourceapi.ResourceClaim, error) {
	return listCache(ctx, s.c, &resourceapi.ResourceClaimList{}, func(l *resourceapi.ResourceClaimList) []resourceapi.ResourceClaim { return l.Items })
}

func (s *cacheSource) classes(ctx context.Context) ([]*resourceapi.DeviceClass, error) {
	return listCache(ctx, s.c, &resourceapi.DeviceClassList{}, func(l *resourceapi.DeviceClassList) []resourceapi.DeviceClass { return l.Items })
}

func (s *cacheSource) kueueServed() bool { return len(s.kueueInf) > 0 }

func (s *cacheSource) kueueRead(gvr schema.GroupVersionResource) bool {
	inf := s.kueueInf[gvr]
	return inf != nil && inf.HasSynced()
}

func (s *cacheSource) kueueList(ctx context.Context, gvr schema.GroupVersionResource) []runtime.Object {
	if !s.kueueRead(gvr) {
		return nil
	}
	l := kueueKinds[gvr].list()
	if err := s.c.List(ctx, l, client.UnsafeDisableDeepCopy); err != nil {
		klog.FromContext(ctx).Error(err, "Listing Kueue objects from the cache", "resource", gvr.Resource)
		return nil
	}
	objs, err := meta.ExtractList(l)
	if err != nil {
		return nil
	}
	return objs
}

func (s *cacheSource) claimTemplate(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaimTemplate, error) {
	var t resourceapi.ResourceClaimTemplate
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

func (s *cacheSource) resourceFlavor(ctx context.Context, name string) (*kueue.ResourceFlavor, error) {
	var rf kueue.ResourceFlavor
	if err := s.c.Get(ctx, client.ObjectKey{Name: name}, &rf); err != nil {
		return nil, err
	}
	return &rf, nil
}

// job reads the Job from the cache, when it holds Jobs: reading one it does not would
// start an informer the owner's RBAC may not allow.
func (s *cacheSource) job(ctx context.Context, namespace, name string) (*batchv1.Job, error) {
	if !s.jobs {
		return nil, apierrors.NewNotFound(jobsResource, name)
	}
	var j batchv1.Job
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &j); err != nil {
		return nil, err
	}
	return &j, nil
}
