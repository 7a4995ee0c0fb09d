package cdi

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi"
	"github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi/transform"
	transformroot "github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi/transform/root"
	"github.com/go-logr/logr"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// DefaultHookPath is where nvidia-container-toolkit installs nvidia-cdi-hook.
const DefaultHookPath = "/usr/bin/nvidia-cdi-hook"

// DriverOptions say where the NVIDIA driver is and how nvcdi reads it.
type DriverOptions struct {
	// Root is the host directory holding the driver's libraries, binaries and device
	// nodes: "/" on a GPU node, the lab's fake root with a simulated backend. The specs
	// name its files by host path: the container runtime reads them on the host.
	Root string
	// ContainerRoot is where this process sees Root when it runs in a container that
	// mounts Root elsewhere (the chart's plugin pod: /driver-root); "" when it sees Root
	// where the host does. nvcdi reads the driver there, and the paths it finds are
	// rewritten to Root's, as NVIDIA's DRA driver does (--container-driver-root).
	ContainerRoot string
	// NVML is gpudra's own NVML: the real library or a simulated server. nvcdi asks it
	// for the driver version and the devices, so both go through the same code.
	NVML nvml.Interface
	// HookPath is the host path of nvidia-cdi-hook, which the container runtime runs for
	// the specs' hooks (update-ldcache, create-symlinks, ...); "" writes no hooks.
	HookPath string
	// Simulated marks a simulated backend: a driver root without libraries, or a device
	// nvcdi cannot describe, is logged and gpudra's own device nodes stand in, where on
	// a GPU node it is an error.
	Simulated bool
	Logger    logr.Logger
}

// Driver gives the GPU parts of each claim's spec: the edits every GPU container needs
// (control device nodes, driver libraries and binaries, IPC sockets, firmware, hooks),
// computed once, and each GPU's or MIG device's own (device nodes, hooks), from
// nvidia-container-toolkit's nvcdi in NVML mode.
type Driver struct {
	lib       nvcdi.Interface
	toHost    transform.Transformer // ContainerRoot's paths to Root's
	simulated bool
	logger    logr.Logger
	// common is nil when nvcdi found no driver (simulated backends only).
	common *cdispec.ContainerEdits

	mu   sync.Mutex
	gpus map[string]*cdispec.ContainerEdits // whole GPUs' edits by UUID; nil: gpudra's own
}

// NewDriver reads the driver installation under o.Root (as this process sees it:
// o.ContainerRoot). With a real backend, a root without the driver's libraries is an
// error: containers would get a GPU they cannot use.
func NewDriver(o DriverOptions) (*Driver, error) {
	root := cmp.Or(o.Root, "/")
	read := cmp.Or(o.ContainerRoot, root)
	opts := []nvcdi.Option{
		nvcdi.WithMode(nvcdi.ModeNvml),
		nvcdi.WithNvmlLib(o.NVML),
		nvcdi.WithDriverRoot(read),
		nvcdi.WithDevRoot(read),
		nvcdi.WithVendor(Vendor),
		nvcdi.WithClass(Class),
		nvcdi.WithLogger(nvcdiLogger{o.Logger.WithName("nvcdi")}),
		// Devices are looked up through o.NVML only, never libnvidia-sandboxutils:
		// the simulated and the real backend take the same path.
		nvcdi.WithFeatureFlags(nvcdi.FeatureDisableNvsandboxUtils),
	}
	if o.HookPath == "" {
		opts = append(opts, nvcdi.WithDisabledHooks(nvcdi.AllHooks))
	} else {
		opts = append(opts, nvcdi.WithNVIDIACDIHookPath(o.HookPath))
	}
	d := &Driver{simulated: o.Simulated, logger: o.Logger, gpus: map[string]*cdispec.ContainerEdits{},
		toHost: transformroot.New(transformroot.WithRoot(read), transformroot.WithTargetRoot(root), transformroot.WithRelativeTo("host"))}
	where := root
	if read != root {
		where = fmt.Sprintf("%s (mounted at %s)", root, read)
	}
	var err error
	d.lib, err = guard(o.Simulated, func() (nvcdi.Interface, error) { return nvcdi.New(opts...) })
	if err != nil {
		return nil, fmt.Errorf("nvcdi for driver root %s: %w", where, err)
	}
	common, err := guard(o.Simulated, d.lib.GetCommonEdits)
	switch {
	case err != nil && !o.Simulated:
		return nil, fmt.Errorf("no NVIDIA driver under driver root %s (is --driver-root the directory holding the driver's libnvidia-ml.so.<version>, and --container-driver-root where the plugin's container mounts it?): %w", where, err)
	case err != nil:
		o.Logger.Info("WARNING: the simulated node's driver root has no NVIDIA driver libraries for its driver version; containers get device nodes but no driver libraries, binaries or hooks",
			"driverRoot", where, "err", err)
	default:
		e := commonEdits(common.ContainerEdits)
		if err := d.onHost(&e); err != nil {
			return nil, err
		}
		d.common = &e
		o.Logger.Info("NVIDIA driver files for CDI specs", "driverRoot", root, "deviceNodes", len(e.DeviceNodes), "mounts", len(e.Mounts), "hooks", len(e.Hooks))
	}
	return d, nil
}

// commonEdits are nvcdi's common edits less what gpudra sets itself: NVIDIA_VISIBLE_DEVICES
// (every spec's guard, see SpecEdits) and the node-wide MPS pipe directory (gpudra mounts
// each claim's own daemon, and only under MPS).
func commonEdits(e *cdispec.ContainerEdits) cdispec.ContainerEdits {
	out := *e
	out.Env = slices.DeleteFunc(slices.Clone(e.Env), func(kv string) bool {
		return strings.HasPrefix(kv, "NVIDIA_VISIBLE_DEVICES=")
	})
	out.Mounts = slices.DeleteFunc(slices.Clone(e.Mounts), func(m *cdispec.Mount) bool {
		return m.ContainerPath == MPSPipeDir || m.ContainerPath == MPSLogDir
	})
	return out
}

// Common is the spec-wide part: nil when no driver was found (simulated backends).
func (d *Driver) Common() *cdispec.ContainerEdits { return d.common }

// deviceEdits are nvcdi's edits for dev's GPUs or MIG device. nil means gpudra's own
// device nodes stand: with a simulated backend, when nvcdi cannot describe the device
// (go-nvml's mock servers have no MIG device handles; the host has no
// /proc/driver/nvidia-caps) or finds no device node for it.
func (d *Driver) deviceEdits(dev Device) (*cdispec.ContainerEdits, error) {
	if m := dev.MIG; m != nil {
		return d.described(m.UUID, "MIG device "+dev.Device)
	}
	out := &cdispec.ContainerEdits{}
	for _, g := range dev.GPUs {
		d.mu.Lock()
		e, ok := d.gpus[g.UUID]
		d.mu.Unlock()
		if !ok {
			var err error
			if e, err = d.described(g.UUID, fmt.Sprintf("GPU %d", g.Index)); err != nil {
				return nil, err
			}
			d.mu.Lock()
			d.gpus[g.UUID] = e
			d.mu.Unlock()
		}
		if e == nil {
			return nil, nil
		}
		*out = merged(*out, *e)
	}
	return out, nil
}

// merged is a followed by b, in new slices (a and b may be cached).
func merged(a, b cdispec.ContainerEdits) cdispec.ContainerEdits {
	return cdispec.ContainerEdits{
		Env:            slices.Concat(a.Env, b.Env),
		DeviceNodes:    slices.Concat(a.DeviceNodes, b.DeviceNodes),
		Hooks:          slices.Concat(a.Hooks, b.Hooks),
		Mounts:         slices.Concat(a.Mounts, b.Mounts),
		IntelRdt:       cmp.Or(b.IntelRdt, a.IntelRdt),
		AdditionalGIDs: slices.Concat(a.AdditionalGIDs, b.AdditionalGIDs),
		NetDevices:     slices.Concat(a.NetDevices, b.NetDevices),
	}
}

// described asks nvcdi for the device with the given UUID.
func (d *Driver) described(uuid, what string) (*cdispec.ContainerEdits, error) {
	devs, err := guard(d.simulated, func() ([]cdispec.Device, error) { return d.lib.GetDeviceSpecsByID(uuid) })
	if err == nil && (len(devs) == 0 || len(devs[0].ContainerEdits.DeviceNodes) == 0) {
		err = errors.New("no device node found under the driver root")
	}
	if err != nil {
		if !d.simulated {
			return nil, fmt.Errorf("CDI edits of %s (%s): %w", what, uuid, err)
		}
		d.logger.Info("WARNING: nvcdi cannot describe a simulated device; gpudra writes its device nodes itself", "device", what, "uuid", uuid, "err", err)
		return nil, nil
	}
	e := devs[0].ContainerEdits
	if err := d.onHost(&e); err != nil {
		return nil, fmt.Errorf("CDI edits of %s (%s): %w", what, uuid, err)
	}
	return &e, nil
}

// onHost rewrites e's host paths (device nodes, mounts, the arguments of hooks the
// runtime runs on the host) from where this process reads the driver to Root.
func (d *Driver) onHost(e *cdispec.ContainerEdits) error {
	spec := &cdispec.Spec{ContainerEdits: *e}
	if err := d.toHost.Transform(spec); err != nil {
		return fmt.Errorf("driver root paths to host paths: %w", err)
	}
	*e = spec.ContainerEdits
	return nil
}

// guard runs f; with a simulated backend, a panic (a go-nvml mock method the simulation
// does not provide) becomes an error.
func guard[T any](simulated bool, f func() (T, error)) (out T, err error) {
	if simulated {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("simulated NVML cannot answer nvcdi: %v", r)
			}
		}()
	}
	return f()
}

// nvcdiLogger passes nvcdi's messages to gpudra's log: its warnings (optional files it
// did not find) at V(2), information at V(4), debug and trace at V(6).
type nvcdiLogger struct{ l logr.Logger }

func (n nvcdiLogger) Errorf(f string, a ...any)   { n.l.Error(nil, fmt.Sprintf(f, a...)) }
func (n nvcdiLogger) Warningf(f string, a ...any) { n.l.V(2).Info(fmt.Sprintf(f, a...)) }
func (n nvcdiLogger) Infof(f string, a ...any)    { n.l.V(4).Info(fmt.Sprintf(f, a...)) }
func (n nvcdiLogger) Debugf(f string, a ...any)   { n.l.V(6).Info(fmt.Sprintf(f, a...)) }
func (n nvcdiLogger) Tracef(f string, a ...any)   { n.l.V(6).Info(fmt.Sprintf(f, a...)) }
