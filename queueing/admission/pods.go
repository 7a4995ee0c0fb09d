package admission

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/tools/events"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/gpudra/gpudra/topology"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

const (
	// annotationCompletionIndex is set by the Job controller on Indexed Job pods.
	annotationCompletionIndex = "batch.kubernetes.io/job-completion-index"
)

// What the JobSet controller (jobset.x-k8s.io) puts on the Jobs of a replicated job and
// their pods, as labels and annotations. Kueue makes one pod set of each replicated job,
// replicas × parallelism pods, so a pod's slot in its pod set's plan is its job index times
// the pods of one Job, plus its completion index.
const (
	labelJobSetUID         = "jobset.sigs.k8s.io/jobset-uid"
	labelReplicatedJob     = "jobset.sigs.k8s.io/replicatedjob-name"
	labelReplicatedJobSize = "jobset.sigs.k8s.io/replicatedjob-replicas"
	labelJobIndex          = "jobset.sigs.k8s.io/job-index"
)

// What the training operator (kubeflow.org/v1: PyTorchJob, ...) puts on the pods of a job.
// Kueue makes one pod set of each replica type (master, worker), named after it in lower
// case as the label's value is; a pod's slot in its pod set's plan is its replica index.
const (
	labelReplicaType  = "training.kubeflow.org/replica-type"
	labelReplicaIndex = "training.kubeflow.org/replica-index"
)

// PodPinner lifts the gpudra scheduling gate of pods whose gang was placed: it sets the
// pod's node selector to its planned node (allowed while a pod is gated) and removes the gate.
type PodPinner struct {
	Client client.Client
	// Recorder, when set, records a Normal Event on each pod pinned: its node and its slot
	// in the gang's plan.
	Recorder events.EventRecorder
	// Now is the clock (tests may replace it).
	Now func() time.Time

	mu sync.Mutex
	// pinned are the slots this pinner gave, by pod UID, until its cache shows them: a
	// sibling pinned a moment ago may still be gated in the cache, and reading the cache
	// alone gave two pods of a gang the same slot (found by the admission benchmark: a node
	// planned for three of a gang's pods got four, the fourth never scheduled).
	pinned map[types.UID]pinnedSlot
}

type pinnedSlot struct {
	owner string
	plan  string
	slot  int
	at    time.Time
}

// pinnedTTL bounds how long a given slot is remembered without the cache showing it (a pod
// deleted before the cache saw it pinned).
const pinnedTTL = 2 * time.Minute

// SetupWithManager registers the pod controller for gated pods only.
func (p *PodPinner) SetupWithManager(mgr ctrl.Manager) error {
	gated := predicate.NewPredicateFuncs(func(o client.Object) bool {
		pod, ok := o.(*corev1.Pod)
		return ok && hasGate(pod) && pod.Annotations[api.AnnotationPlacement] != ""
	})
	return ctrl.NewControllerManagedBy(mgr).For(&corev1.Pod{}, builder.WithPredicates(gated)).Named("gpudra-pod-pinner").Complete(p)
}

func hasGate(pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == api.SchedulingGate })
}

// Reconcile pins one gated pod.
func (p *PodPinner) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pod corev1.Pod
	if err := p.Client.Get(ctx, req.NamespacedName, &pod); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	plan := pod.Annotations[api.AnnotationPlacement]
	if !hasGate(&pod) || plan == "" {
		return ctrl.Result{}, nil
	}
	nodes := strings.Split(plan, ",")
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, done := p.pinned[pod.UID]; done {
		// Pinned a moment ago; the cache still shows the pod gated.
		return ctrl.Result{}, nil
	}
	slot, err := p.slot(ctx, &pod, len(nodes))
	if err != nil {
		return ctrl.Result{}, err
	}
	if pod.Spec.NodeSelector == nil {
		pod.Spec.NodeSelector = map[string]string{}
	}
	pod.Spec.NodeSelector[topology.LabelHostname] = nodes[slot]
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[api.LabelPinnedSlot] = strconv.Itoa(slot)
	pod.Spec.SchedulingGates = slices.DeleteFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == api.SchedulingGate })
	if err := p.Client.Update(ctx, &pod); err != nil {
		return ctrl.Result{}, err
	}
	if !indexed(&pod) {
		if owner := gangOwner(&pod); owner != "" {
			if p.pinned == nil {
				p.pinned = map[types.UID]pinnedSlot{}
			}
			p.pinned[pod.UID] = pinnedSlot{owner: owner, plan: plan, slot: slot, at: p.now()}
		}
	}
	podsPinned.Inc()
	if p.Recorder != nil {
		p.Recorder.Eventf(&pod, nil, corev1.EventTypeNormal, ReasonPodPinned, "Pin",
			"pinned to node %s: slot %d of the %d nodes gpudra.dev/topology planned for its gang", nodes[slot], slot, len(nodes))
	}
	return ctrl.Result{}, nil
}

// indexed is whether the pod's slot follows from its own labels or annotations.
func indexed(pod *corev1.Pod) bool {
	_, completion := pod.Annotations[annotationCompletionIndex]
	_, replica := pod.Labels[labelReplicaIndex]
	return completion || replica && pod.Labels[labelReplicaType] != ""
}

func (p *PodPinner) now() time.Time {
	if p.Now == nil {
		return time.Now()
	}
	return p.Now()
}

// slot is the pod's place in the plan: its Job completion index (offset by its Job's index
// in a JobSet's replicated job), its replica index in a training operator's job, or else
// the first slot no sibling pod (same owner and plan) holds, in the cache or as this
// pinner gave it. Called with p.mu held.
func (p *PodPinner) slot(ctx context.Context, pod *corev1.Pod, n int) (int, error) {
	if v, ok := pod.Labels[labelReplicaIndex]; ok && pod.Labels[labelReplicaType] != "" {
		i, err := strconv.Atoi(v)
		if err != nil || i < 0 || i >= n {
			return 0, fmt.Errorf("pod %s/%s: label %s=%q outside the plan of %d pods of replica type %s", pod.Namespace, pod.Name, labelReplicaIndex, v, n, pod.Labels[labelReplicaType])
		}
		return i, nil
	}
	if v, ok := pod.Annotations[annotationCompletionIndex]; ok {
		i, err := strconv.Atoi(v)
		if err != nil || i < 0 {
			return 0, fmt.Errorf("pod %s/%s: completion index %q is not a non-negative integer", pod.Namespace, pod.Name, v)
		}
		first, size, err := jobSlots(pod, n)
		if err != nil {
			return 0, err
		}
		if i >= size {
			return 0, fmt.Errorf("pod %s/%s: completion index %q outside the plan of %d pods", pod.Namespace, pod.Name, v, size)
		}
		return first + i, nil
	}
	var siblings corev1.PodList
	if err := p.Client.List(ctx, &siblings, client.InNamespace(pod.Namespace), client.HasLabels{api.LabelPinnedSlot}); err != nil {
		return 0, err
	}
	taken := map[int]bool{}
	for _, s := range siblings.Items {
		// The cache shows this pod pinned: it speaks for the slot from now on.
		delete(p.pinned, s.UID)
		if s.Annotations[api.AnnotationPlacement] == pod.Annotations[api.AnnotationPlacement] && gangOwner(&s) != "" && gangOwner(&s) == gangOwner(pod) {
			if i, err := strconv.Atoi(s.Labels[api.LabelPinnedSlot]); err == nil {
				taken[i] = true
			}
		}
	}
	for uid, s := range p.pinned {
		if p.now().Sub(s.at) > pinnedTTL {
			delete(p.pinned, uid)
			continue
		}
		if owner := gangOwner(pod); owner != "" && s.owner == owner && s.plan == pod.Annotations[api.AnnotationPlacement] {
			taken[s.slot] = true
		}
	}
	for i := range n {
		if !taken[i] {
			return i, nil
		}
	}
	return 0, fmt.Errorf("pod %s/%s: all %d planned slots are taken", pod.Namespace, pod.Name, n)
}

// gangOwner names what the pod's pod set belongs to: its JobSet and replicated job (whose
// Jobs share one pod set), its owner and replica type (a training operator's job has a pod
// set per replica type), else its owner; "" for a pod without one.
func gangOwner(pod *corev1.Pod) string {
	if js, rj := pod.Labels[labelJobSetUID], pod.Labels[labelReplicatedJob]; js != "" && rj != "" {
		return js + "/" + rj
	}
	if len(pod.OwnerReferences) == 0 {
		return ""
	}
	if rt := pod.Labels[labelReplicaType]; rt != "" {
		return string(pod.OwnerReferences[0].UID) + "/" + rt
	}
	return string(pod.OwnerReferences[0].UID)
}

// jobSlots are the slots of a plan of n that belong to the pod's Job: all n for a Job of its
// own, the job index's share for a Job of a JobSet's replicated job.
func jobSlots(pod *corev1.Pod, n int) (first, size int, err error) {
	idx, ok := pod.Labels[labelJobIndex]
	if !ok || pod.Labels[labelReplicatedJob] == "" {
		return 0, n, nil
	}
	replicas, rerr := strconv.Atoi(pod.Labels[labelReplicatedJobSize])
	j, jerr := strconv.Atoi(idx)
	switch {
	case rerr != nil || replicas < 1:
		return 0, 0, fmt.Errorf("pod %s/%s: label %s=%q is not a positive integer", pod.Namespace, pod.Name, labelReplicatedJobSize, pod.Labels[labelReplicatedJobSize])
	case jerr != nil || j < 0 || j >= replicas:
		return 0, 0, fmt.Errorf("pod %s/%s: label %s=%q is outside the %d replicas of its replicated job", pod.Namespace, pod.Name, labelJobIndex, idx, replicas)
	case n%replicas != 0:
		return 0, 0, fmt.Errorf("pod %s/%s: a plan of %d pods does not split into the %d Jobs of replicated job %s", pod.Namespace, pod.Name, n, replicas, pod.Labels[labelReplicatedJob])
	}
	size = n / replicas
	return j * size, size, nil
}
