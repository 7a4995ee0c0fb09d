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
)

// apiReadTimeout bounds each read of a claim's pods, or of their other claims, at prepare.
const apiReadTimeout = 10 * time.Second

// apiReader reads, at prepare, the pods a claim is reserved for and their other claims:
// for a share's priority (podPriorities) and for HAMi-core's CUDA indices (hamiIndices).
type apiReader struct {
	pod   func(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	claim func(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error)
}

// newAPIReader reads with client; nil without one.
func newAPIReader(client kubernetes.Interface) *apiReader {
	if client == nil {
		return nil
	}
	return &apiReader{
		pod: func(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
			return client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		},
		claim: func(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error) {
			return client.ResourceV1().ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
		},
	}
}

// claimReads are one prepare's reads of the claim's pods: each pod is read once, by
// whichever part of the plan needs the pods first.
type claimReads struct {
	api   *apiReader
	claim *resourceapi.ResourceClaim
	pods  []*corev1.Pod
	read  bool
}

// reservedPods are the pods the claim is reserved for. A pod that no longer exists (or
// was replaced by another of the same name) does not count; any other read error fails
// the prepare, which the kubelet retries, rather than guess.
func (r *claimReads) reservedPods() ([]*corev1.Pod, error) {
	if r.read {
		return r.pods, nil
	}
	c := r.claim
	var pods []*corev1.Pod
	for _, ref := range c.Status.ReservedFor {
		if ref.APIGroup != "" || ref.Resource != "pods" {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), apiReadTimeout)
		pod, err := r.api.pod(ctx, c.Namespace, ref.Name)
		cancel()
		if apierrors.IsNotFound(err) || (err == nil && pod.UID != ref.UID) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading pod %s/%s, which claim %s is reserved for: %w", c.Namespace, ref.Name, c.Name, err)
		}
		pods = append(pods, pod)
	}
	r.pods, r.read = pods, true
	return pods, nil
}
