package kubeletplugin

import (
	"context"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/kubeletplugin/health"
)

// EventSource is the component of the Events the plugin records on its Node.
const EventSource = "gpudra-kubelet-plugin"

// Reasons of the Events on the Node (kubectl describe node shows them).
const (
	// ReasonGPUUnreadable: discovery could not read a GPU; none of its devices is published.
	ReasonGPUUnreadable = "GPUUnreadable"
	// ReasonGPUUnhealthy: a GPU's devices are published with the gpu.gpudra.dev/unhealthy taint.
	ReasonGPUUnhealthy = "GPUUnhealthy"
	// ReasonGPUHealthy: a GPU that was unhealthy is published untainted again.
	ReasonGPUHealthy = "GPUHealthy"
)

// nodeEvents records Events about the node's GPUs on its Node (core/v1 Events, as the
// kubelet's about its node: ones with different messages stay apart). A nil
// *nodeEvents records nothing (a plugin without an API server, as in New).
type nodeEvents struct {
	ctx      context.Context
	recorder record.EventRecorder
	node     *corev1.ObjectReference
}

// startNodeEvents starts recording Events on the Node until ctx ends; the broadcaster
// is shut down by a goroutine in wg.
func startNodeEvents(ctx context.Context, client kubernetes.Interface, nodeName string, nodeUID types.UID, wg *sync.WaitGroup) *nodeEvents {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	wg.Go(func() {
		<-ctx.Done()
		b.Shutdown()
	})
	return &nodeEvents{
		ctx:      ctx,
		recorder: b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: EventSource, Host: nodeName}),
		// Events on a Node go in the default namespace, as the kubelet's.
		node: &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: nodeName, UID: nodeUID},
	}
}

// eventf records an Event on the Node unless the plugin is stopping.
func (e *nodeEvents) eventf(eventtype, reason, messageFmt string, args ...any) {
	if e == nil || e.ctx.Err() != nil {
		return
	}
	e.recorder.Eventf(e.node, eventtype, reason, messageFmt, args...)
}

// startup records what the plugin's start found: the GPUs it could not read and those
// healthy again.
func (e *nodeEvents) startup(unreadable []driver.UnreadableGPU, cleared []health.Cleared) {
	for _, u := range unreadable {
		e.eventf(corev1.EventTypeWarning, ReasonGPUUnreadable, "GPU %d cannot be read and none of its devices is published: %s", u.Index, u.Reason)
	}
	for _, c := range cleared {
		e.eventf(corev1.EventTypeNormal, ReasonGPUHealthy, "GPU %d (%s) is published without its taint %s again: %s", c.Index, c.UUID, health.TaintString(c.Taint.Device()), c.Why)
	}
}

// unhealthy records that GPU gpu's devices are published with taint.
func (e *nodeEvents) unhealthy(gpu int, taint resourceapi.DeviceTaint, xid uint64) {
	cause := taint.Value
	if xid != 0 {
		cause += " (XID " + strconv.FormatUint(xid, 10) + ")"
	}
	e.eventf(corev1.EventTypeWarning, ReasonGPUUnhealthy, "GPU %d is unhealthy: %s; its devices are published with the taint %s", gpu, cause, health.TaintString(taint))
}

// reportUnreadable logs the GPUs discovery could not read and counts them in the metrics.
func (d *Driver) reportUnreadable(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for _, u := range d.inventory.Unreadable {
		logger.Error(nil, "GPU cannot be read: none of its devices is published, the node's other GPUs are",
			"gpu", u.Index, "nvmlCall", u.Call, "nvmlReturn", u.Return, "reason", u.Reason)
		d.metrics.unreadableGPUs.WithLabelValues(strconv.Itoa(u.Index), u.Call, u.Return).Set(1)
	}
}
