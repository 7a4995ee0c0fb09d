package kubeletplugin

import (
	"context"
	"errors"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/driver"
)

// Config is what the plugin needs to run on one node.
type Config struct {
	NodeName      string
	Client        kubernetes.Interface
	Backend       *driver.Backend
	Render        driver.RenderOptions
	PluginDataDir string
	RegistrarDir  string
	CDIRoot       string
	CheckpointDir string
}

// Driver is the running plugin for one node.
type Driver struct {
	cfg       Config
	inventory *driver.Inventory
	pool      *driver.Pool
	helper    *kubeletplugin.Helper
	cancel    context.CancelCauseFunc
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// Start discovers the node's GPUs, registers with the kubelet and publishes the
// node's ResourceSlices. Fatal background errors cancel ctx's child; Wait returns them.
func Start(ctx context.Context, cfg Config) (*Driver, error) {
	inv, err := driver.Discover(cfg.Backend)
	if err != nil {
		return nil, fmt.Errorf("discovering GPUs: %w", err)
	}
	pool, err := driver.Render(inv, cfg.Render)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	d := &Driver{cfg: cfg, inventory: inv, pool: pool, cancel: cancel}

	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(driver.DriverName),
		kubeletplugin.NodeName(cfg.NodeName),
		kubeletplugin.KubeClient(cfg.Client),
		kubeletplugin.PluginDataDirectoryPath(cfg.PluginDataDir),
		kubeletplugin.RegistrarDirectoryPath(cfg.RegistrarDir),
	}
	if node, err := cfg.Client.CoreV1().Nodes().Get(ctx, cfg.NodeName, metav1.GetOptions{}); err == nil {
		opts = append(opts, kubeletplugin.NodeUID(node.UID))
	} else if !apierrors.IsNotFound(err) {
		cancel(err)
		return nil, fmt.Errorf("reading Node %s: %w", cfg.NodeName, err)
	}
	helper, err := kubeletplugin.Start(ctx, d, opts...)
	if err != nil {
		cancel(err)
		return nil, fmt.Errorf("starting the kubelet plugin: %w", err)
	}
	d.helper = helper
	if err := helper.PublishResources(ctx, pool.DriverResources(cfg.NodeName)); err != nil {
		helper.Stop()
		cancel(err)
		return nil, fmt.Errorf("publishing ResourceSlices: %w", err)
	}
	klog.FromContext(ctx).Info("Publishing ResourceSlices", "node", cfg.NodeName, "backend", inv.Backend, "gpus", len(inv.GPUs), "slices", len(pool.Slices))
	return d, nil
}

// Inventory is what the plugin discovered.
func (d *Driver) Inventory() *driver.Inventory { return d.inventory }

// Stop unregisters and stops publishing (published slices stay until the node goes).
func (d *Driver) Stop() {
	d.helper.Stop()
	d.cancel(nil)
}

// PrepareResourceClaims prepares allocated claims. Not yet implemented: every claim
// gets an error, so the kubelet retries and no container starts without its devices.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		out[c.UID] = kubeletplugin.PrepareResult{Err: errors.New("gpudra: preparing claims is not implemented yet")}
	}
	return out, nil
}

// UnprepareResourceClaims undoes PrepareResourceClaims; nothing is prepared yet.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		out[c.UID] = nil
	}
	return out, nil
}

// HandleError logs background errors. Publishing errors (invalid or dropped fields)
// will not fix themselves: they stop the plugin so that it fails loudly.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	runtime.HandleErrorWithContext(ctx, err, msg)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) {
		d.cancel(fmt.Errorf("%s: %w", msg, err))
	}
}

// WatchHealthStatus is not supported yet.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}
