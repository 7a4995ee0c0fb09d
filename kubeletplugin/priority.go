package kubeletplugin

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// podPriorityTimeout bounds the reads of a claim's pods at prepare.
const podPriorityTimeout = 10 * time.Second

// podPriorities gives a share whose configuration leaves limits.priority unset the
// priority of the pods its claim is reserved for (Config.SharePriorityThreshold): High when
// the highest spec.priority among them (what admission resolved from their PriorityClass;
// none: 0) is at least threshold, else Low.
type podPriorities struct {
	threshold int32
	pod       func(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	logger    klog.Logger
}

func newPodPriorities(threshold *int32, client kubernetes.Interface, logger klog.Logger) *podPriorities {
	if threshold == nil || client == nil {
		return nil
	}
	return &podPriorities{threshold: *threshold, logger: logger, pod: func(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
		return client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	}}
}

// derived is a share's priority as its claim's pods give it, and why.
type derived struct {
	priority api.SharePriority
	// podPriority is the highest priority among the claim's pods; pod names it ("": no
	// pod the claim is reserved for exists any more).
	podPriority int32
	pod         string
}

// of reads the pods claim is reserved for. A pod that no longer exists (or was replaced by
// another of the same name) does not count; any other read error fails the prepare, which
// the kubelet retries, rather than guess.
func (pp *podPriorities) of(claim *resourceapi.ResourceClaim) (derived, error) {
	d := derived{priority: api.PriorityLow}
	for _, ref := range claim.Status.ReservedFor {
		if ref.APIGroup != "" || ref.Resource != "pods" {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), podPriorityTimeout)
		pod, err := pp.pod(ctx, claim.Namespace, ref.Name)
		cancel()
		if apierrors.IsNotFound(err) || (err == nil && pod.UID != ref.UID) {
			continue
		}
		if err != nil {
			return derived{}, fmt.Errorf("reading pod %s/%s, which claim %s is reserved for, for the share's priority (limits.priority is unset): %w", claim.Namespace, ref.Name, claim.Name, err)
		}
		if v := ptr.Deref(pod.Spec.Priority, 0); d.pod == "" || v > d.podPriority {
			d.podPriority, d.pod = v, pod.Name
		}
	}
	if d.pod != "" && d.podPriority >= pp.threshold {
		d.priority = api.PriorityHigh
	}
	pp.logger.V(2).Info("Share priority from the claim's pods", "claim", klog.KObj(claim), "priority", d.priority,
		"pod", d.pod, "podPriority", d.podPriority, "threshold", pp.threshold)
	return d, nil
}
