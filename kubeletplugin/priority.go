package kubeletplugin

import (
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// podPriorities gives a share whose configuration leaves limits.priority unset the
// priority of the pods its claim is reserved for (Config.SharePriorityThreshold): High when
// the highest spec.priority among them (what admission resolved from their PriorityClass;
// none: 0) is at least threshold, else Low.
type podPriorities struct {
	threshold int32
	logger    klog.Logger
}

// newPodPriorities is nil without a threshold or without an API server to read the pods
// from.
func newPodPriorities(threshold *int32, reader *apiReader, logger klog.Logger) *podPriorities {
	if threshold == nil || reader == nil {
		return nil
	}
	return &podPriorities{threshold: *threshold, logger: logger}
}

// derived is a share's priority as its claim's pods give it, and why.
type derived struct {
	priority api.SharePriority
	// podPriority is the highest priority among the claim's pods; pod names it ("": no
	// pod the claim is reserved for exists any more).
	podPriority int32
	pod         string
}

// of is the priority that pods, those the claim is reserved for, give its shares.
func (pp *podPriorities) of(claim *resourceapi.ResourceClaim, pods []*corev1.Pod) derived {
	d := derived{priority: api.PriorityLow}
	for _, pod := range pods {
		if v := ptr.Deref(pod.Spec.Priority, 0); d.pod == "" || v > d.podPriority {
			d.podPriority, d.pod = v, pod.Name
		}
	}
	if d.pod != "" && d.podPriority >= pp.threshold {
		d.priority = api.PriorityHigh
	}
	pp.logger.V(2).Info("Share priority from the claim's pods", "claim", klog.KObj(claim), "priority", d.priority,
		"pod", d.pod, "podPriority", d.podPriority, "threshold", pp.threshold)
	return d
}
