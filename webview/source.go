package webview

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// source is where the pages read the cluster's objects from: informers the Server runs
// itself (Options.Kube), or a controller-runtime cache someone else runs (Options.Cache).
// Every list is the whole cache; a request's scope filters it to what its caller may read.
type source interface {
	// start fills the caches (or waits until they are filled) and calls changed after
	// each change.
	start(ctx context.Context, changed func()) error
	nodes(ctx context.Context) ([]*corev1.Node, error)
	pods(ctx context.Context) ([]*corev1.Pod, error)
	slices(ctx context.Context) ([]*resourceapi.ResourceSlice, error)
	claims(ctx context.Context) ([]*resourceapi.ResourceClaim, error)
	classes(ctx context.Context) ([]*resourceapi.DeviceClass, error)
	// kueueServed is whether the cluster serves Kueue's API.
	kueueServed() bool
	// kueueRead is whether one Kueue resource's cache is filled (it is not while the
	// resource may not be listed, say).
	kueueRead(gvr schema.GroupVersionResource) bool
	// kueueList lists one Kueue resource, typed or unstructured; nothing while it is not
	// read.
	kueueList(ctx context.Context, gvr schema.GroupVersionResource) []runtime.Object
	// claimTemplate, resourceFlavor and job get the objects only a Workload's page reads,
	// one at a time.
	claimTemplate(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaimTemplate, error)
	resourceFlavor(ctx context.Context, name string) (*kueue.ResourceFlavor, error)
	// job gets a batch/v1 Job; NotFound where Jobs are not read (a cache that does not
	// hold them).
	job(ctx context.Context, namespace, name string) (*batchv1.Job, error)
}

// informerSource runs client-go informers over a clientset and a dynamic client.
type informerSource struct {
	kubeClient kubernetes.Interface
	dynClient  dynamic.Interface

	kube      informers.SharedInformerFactory
	dyn       dynamicinformer.DynamicSharedInformerFactory
	kueue     bool
	nodeL     listersv1.NodeLister
	podL      listersv1.PodLister
	sliceL    resourcelisters.ResourceSliceLister
	claimL    resourcelisters.ResourceClaimLister
	classL    resourcelisters.DeviceClassLister
	kueueInfs map[schema.GroupVersionResource]cache.SharedIndexInformer
}

func eventHandler(changed func()) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		UpdateFunc: func(any, any) { changed() },
		DeleteFunc: func(any) { changed() },
	}
}

func (s *informerSource) start(ctx context.Context, changed func()) error {
	logger := klog.FromContext(ctx)
	s.kube = informers.NewSharedInformerFactory(s.kubeClient, 0)
	handler := eventHandler(changed)
	for _, inf := range []cache.SharedIndexInformer{
		s.kube.Core().V1().Nodes().Informer(),
		s.kube.Core().V1().Pods().Informer(),
		s.kube.Resource().V1().ResourceSlices().Informer(),
		s.kube.Resource().V1().ResourceClaims().Informer(),
		s.kube.Resource().V1().DeviceClasses().Informer(),
	} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return err
		}
	}
	s.nodeL = s.kube.Core().V1().Nodes().Lister()
	s.podL = s.kube.Core().V1().Pods().Lister()
	s.sliceL = s.kube.Resource().V1().ResourceSlices().Lister()
	s.claimL = s.kube.Resource().V1().ResourceClaims().Lister()
	s.classL = s.kube.Resource().V1().DeviceClasses().Lister()
	if s.dynClient != nil {
		if _, err := s.kubeClient.Discovery().ServerResourcesForGroupVersion(KueueGroupVersion.String()); err == nil {
			s.kueue = true
		} else {
			logger.Info("Kueue's API is not served; the queues page stays empty", "groupVersion", KueueGroupVersion.String(), "err", err)
		}
	}
	if s.kueue {
		s.dyn = dynamicinformer.NewDynamicSharedInformerFactory(s.dynClient, 0)
		s.kueueInfs = map[schema.GroupVersionResource]cache.SharedIndexInformer{}
		for _, gvr := range KueueResources {
			inf := s.dyn.ForResource(gvr)
			if err := inf.Informer().SetTransform(typedKueue(gvr)); err != nil {
				return err
			}
			if _, err := inf.Informer().AddEventHandler(handler); err != nil {
				return err
			}
			s.kueueInfs[gvr] = inf.Informer()
		}
	}
	s.kube.Start(ctx.Done())
	if s.dyn != nil {
		s.dyn.Start(ctx.Done())
	}
	for typ, ok := range s.kube.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("webview: the %v cache did not fill", typ)
		}
	}
	if s.dyn != nil {
		// Kueue's objects are not required: a cluster or a user that cannot list some of
		// them still gets the other pages; the queues page names those not read yet.
		wait, cancel := context.WithTimeout(ctx, KueueSyncTimeout)
		for gvr, ok := range s.dyn.WaitForCacheSync(wait.Done()) {
			if !ok {
				logger.Info("Kueue objects not read yet; the queues page goes without them until they are", "resource", gvr.Resource)
			}
		}
		cancel()
	}
	return nil
}

func (s *informerSource) nodes(context.Context) ([]*corev1.Node, error) {
	return s.nodeL.List(labels.Everything())
}

func (s *informerSource) pods(context.Context) ([]*corev1.Pod, error) {
	return s.podL.List(labels.Everything())
}

func (s *informerSource) slices(context.Context) ([]*resourceapi.ResourceSlice, error) {
	return s.sliceL.List(labels.Everything())
}

func (s *informerSource) claims(context.Context) ([]*resourceapi.ResourceClaim, error) {
	return s.claimL.List(labels.Everything())
}

func (s *informerSource) classes(context.Context) ([]*resourceapi.DeviceClass, error) {
	return s.classL.List(labels.Everything())
}

func (s *informerSource) kueueServed() bool { return s.kueue }

func (s *informerSource) kueueRead(gvr schema.GroupVersionResource) bool {
	inf := s.kueueInfs[gvr]
	return inf != nil && inf.HasSynced()
}

func (s *informerSource) kueueList(_ context.Context, gvr schema.GroupVersionResource) []runtime.Object {
	if !s.kueueRead(gvr) {
		return nil
	}
	// The dynamic lister insists on unstructured objects; the store holds typed ones.
	items := s.kueueInfs[gvr].GetStore().List()
	objs := make([]runtime.Object, 0, len(items))
	for _, it := range items {
		if o, ok := it.(runtime.Object); ok {
			objs = append(objs, o)
		}
	}
	return objs
}

func (s *informerSource) claimTemplate(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaimTemplate, error) {
	return s.kubeClient.ResourceV1().ResourceClaimTemplates(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (s *informerSource) resourceFlavor(ctx context.Context, name string) (*kueue.ResourceFlavor, error) {
	if !s.kueue {
		return nil, apierrors.NewNotFound(resourceFlavorsResource, name)
	}
	u, err := s.dynClient.Resource(resourceFlavorsGVR).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var rf kueue.ResourceFlavor
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &rf); err != nil {
		return nil, fmt.Errorf("webview: reading resourceflavor %s: %w", name, err)
	}
	return &rf, nil
}

// job reads the Job from the API server: they are not watched, and the page reads only a
// Workload's Job and the few it runs after.
func (s *informerSource) job(ctx context.Context, namespace, name string) (*batchv1.Job, error) {
	return s.kubeClient.BatchV1().Jobs(namespace).Get(ctx, name, metav1.GetOptions{})
}

// KueueSyncTimeout is how long Start waits for Kueue's objects before it serves without
// those it could not read (a user without list on cohorts, say).
var KueueSyncTimeout = 10 * time.Second
