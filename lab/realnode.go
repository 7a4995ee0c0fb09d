package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/driver/nvmlsim"
)

// A real node is a kubelet, containerd and runc on this machine, beside the kwok nodes: its
// pods are real containers, and its gpudra-kubelet-plugin registers with that kubelet, which
// calls it to prepare claims; containerd applies the plugin's CDI specs. Its GPUs are still
// simulated: the CDI specs point at device files in a fake driver root the lab makes
// (<node>/driver-root/dev/nvidia*, character devices with NVIDIA's numbers, and /dev/kfd and
// /dev/dri/* for AMD GPUs; nothing touches the host's /dev). Everything lives under the node's folder and 127.0.0.1, and `lab down`
// removes its containers, mounts, cgroups and bridge.

// Labels and taint of real nodes.
const (
	LabelRealNode = "lab.gpudra.dev/real-node"
	// RealNodeTaint keeps pods that do not ask for a real node (every kwok-era test) off it.
	RealNodeTaint = LabelRealNode
)

// Component names of a real node's processes.
func ContainerdComponent(node string) string { return "containerd-" + node }
func KubeletComponent(node string) string    { return "kubelet-" + node }

// cgroupRootName is the cgroup (in every hierarchy) under which a real node's kubelet puts
// its pods: one the lab owns and removes.
func cgroupRootName(node string) string { return "gpudra-lab-" + node }

// bridgeName is the Linux bridge of the i-th real node's pod network (≤15 characters).
func bridgeName(i int) string { return "gpdlab" + strconv.Itoa(i) }

// nvidiaMajor is the character-device major of /dev/nvidia* (NVIDIA's registered number);
// drmMajor that of /dev/dri/* (DRM's), kfdMajor that of /dev/kfd (dynamic on a real host).
const (
	drmMajor        = 226
	kfdMajor        = 237
	nvidiaMajor     = 195
	nvidiaCtlMinor  = 255
	nvidiaUVMMajor  = 235 // dynamic on a real host; any free number serves a fake root
	nvidiaCapsMajor = 236
	// fakeGPUs and fakeCapMinors bound what the fake driver root holds: GPU minors 0..15
	// and the MIG capability minors of their GPU and compute instances (cdi.Node.MIGCapMinors:
	// 3 + gpu*135 + gi*9 + entry).
	fakeGPUs      = 16
	fakeCapMinors = 3 + fakeGPUs*135
)

// CheckRealNodeHost says what this machine lacks to run a real lab node (containers), or nil.
func CheckRealNodeHost() error {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (kubelet, containerd and runc need it)")
	}
	if data, err := os.ReadFile("/proc/filesystems"); err != nil || !strings.Contains(string(data), "\toverlay\n") {
		missing = append(missing, "the overlay filesystem (containerd's overlayfs snapshotter)")
	}
	if hs := cgroupHierarchies(); !slices.Contains(hs, "memory") && !slices.Contains(hs, "") {
		missing = append(missing, "cgroups (no memory controller under /sys/fs/cgroup)")
	}
	if len(missing) == 0 {
		tmp, err := os.MkdirTemp("", "gpudra-mknod-")
		if err == nil {
			err = unix.Mknod(filepath.Join(tmp, "probe"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3)))
			os.RemoveAll(tmp)
		}
		if err != nil {
			missing = append(missing, fmt.Sprintf("device files (mknod: %v)", err))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("this machine cannot run a real lab node: missing %s", strings.Join(missing, "; "))
	}
	return nil
}

// cgroupHierarchies lists the cgroup hierarchies mounted under /sys/fs/cgroup by folder name
// ("memory", "cpu", ..., "unified"); "" stands for a cgroup v2 mount at /sys/fs/cgroup itself.
func cgroupHierarchies() []string {
	mounts, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup", "cgroup2"))
	if err != nil {
		return nil
	}
	var out []string
	for _, m := range mounts {
		switch {
		case m.Mountpoint == "/sys/fs/cgroup":
			out = append(out, "")
		case strings.HasPrefix(m.Mountpoint, "/sys/fs/cgroup/"):
			out = append(out, strings.TrimPrefix(m.Mountpoint, "/sys/fs/cgroup/"))
		}
	}
	return out
}

// realNodePaths are the files and folders of one real node, all under its node folder.
type realNodePaths struct {
	dir, containerd, sock, runcRoot, kubelet, driverRoot, cdi, cniConf, cniData string
}

func (l Layout) realNode(node string) realNodePaths {
	d := l.NodeDir(node)
	return realNodePaths{
		dir: d, containerd: filepath.Join(d, "containerd"), sock: filepath.Join(d, "containerd", "containerd.sock"),
		runcRoot: filepath.Join(d, "containerd", "runc"), kubelet: filepath.Join(d, "kubelet"),
		driverRoot: filepath.Join(d, "driver-root"), cdi: filepath.Join(d, "cdi"),
		cniConf: filepath.Join(d, "cni", "net.d"), cniData: filepath.Join(d, "cni", "ipam"),
	}
}

// realNodeIndex is n's position among the lab's real nodes (for its bridge and subnet).
func realNodeIndex(nodes []Node, name string) int {
	i := 0
	for _, n := range nodes {
		if n.Real {
			if n.Name == name {
				return i
			}
			i++
		}
	}
	return -1
}

// startRealNodes starts containerd, kubelet and the plugin of every real node, and waits until
// each node is Ready and its pool published.
func (u *upper) startRealNodes(ctx context.Context, plugin string) error {
	images := filepath.Join(u.layout.BinDir(), "lab-images.tar")
	if err := buildImages(ctx, u.out, u.opts.Repo, images); err != nil {
		return err
	}
	pluginImage := filepath.Join(u.layout.BinDir(), "gpudra-kubelet-plugin-image.tar")
	if err := u.buildPluginImage(ctx, pluginImage); err != nil {
		return err
	}
	for _, n := range u.state.RealNodes() {
		if err := u.startRealNode(ctx, n, plugin, []string{images, pluginImage}); err != nil {
			return err
		}
	}
	return nil
}

func (u *upper) startRealNode(ctx context.Context, n Node, plugin string, images []string) error {
	p := u.layout.realNode(n.Name)
	kubeletRoot := filepath.Join(p.kubelet, "root")
	for _, d := range []string{p.containerd, p.runcRoot, kubeletRoot, p.cdi, p.cniConf, p.cniData,
		filepath.Join(p.dir, "checkpoint"), filepath.Join(p.driverRoot, "dev", "nvidia-caps")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if err := makeFakeDriverRoot(p.driverRoot); err != nil {
		return fmt.Errorf("real node %s: fake driver root: %w", n.Name, err)
	}
	// The driver's user-space files (empty libraries named for the profile's driver
	// version, an nvidia-smi stub): the plugin's nvcdi finds a driver there and the CDI
	// specs mount them into containers, as on a GPU node. A node of AMD GPUs alone (kfd,
	// no NVML profile) has no NVIDIA driver.
	if n.Profile != "" {
		if _, err := nvmlsim.WriteDriverFiles(p.driverRoot, n.Profile); err != nil {
			return fmt.Errorf("real node %s: fake driver files: %w", n.Name, err)
		}
	}
	// A driver root is a shared mount on a host (systemd makes / shared; the GPU Operator's
	// driver container mounts the driver there), and the chart's plugin asks for it with
	// HostToContainer propagation, which the runtime refuses on a private mount; this
	// sandbox's / is private, so the lab binds the driver root onto itself, shared.
	if err := sharedBindMount(p.driverRoot); err != nil {
		return fmt.Errorf("real node %s: driver root: %w", n.Name, err)
	}
	if err := makeCgroupRoot(cgroupRootName(n.Name)); err != nil {
		return fmt.Errorf("real node %s: %w", n.Name, err)
	}
	idx := realNodeIndex(u.state.Nodes, n.Name)
	cni := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "gpudra-lab-%s", "plugins": [{"type": "bridge", "bridge": %q,
  "isGateway": true, "ipMasq": false, "ipam": {"type": "host-local", "dataDir": %q,
  "ranges": [[{"subnet": "10.231.%d.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}}]}
`, n.Name, bridgeName(idx), p.cniData, idx)
	if err := os.WriteFile(filepath.Join(p.cniConf, "10-gpudra-lab.conflist"), []byte(cni), 0o600); err != nil {
		return err
	}

	// containerd 2 (config version 3): CRI with CDI specs from the plugin's folder, runc from
	// the toolchain with its state under the node folder, the lab's pause image.
	cfg := fmt.Sprintf(`version = 3
root = %q
state = %q
[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins.'io.containerd.cri.v1.runtime']
  cdi_spec_dirs = [%q]
  netns_mounts_under_state_dir = true
  # Sandboxes without CAP_SYS_RESOURCE (this one's) cannot lower a process's OOM score, as
  # the kubelet asks for pod sandboxes (-998); keep scores at or above containerd's own.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = %q
        Root = %q
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%q]
    conf_dir = %q
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %q
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`, filepath.Join(p.containerd, "root"), filepath.Join(p.containerd, "state"), p.sock, p.sock+".ttrpc",
		p.cdi, u.tc.Runc, p.runcRoot, u.tc.CNIBin, p.cniConf, PauseImage)
	cfgFile := filepath.Join(p.containerd, "config.toml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		return err
	}
	env := []string{"PATH=" + filepath.Dir(u.tc.Containerd) + ":" + os.Getenv("PATH")}
	cd, err := u.start(ContainerdComponent(n.Name), []string{u.tc.Containerd, "--config=" + cfgFile, "--log-level=info"}, env, nil)
	if err != nil {
		return err
	}
	ctr := func(ctx context.Context, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, u.tc.Ctr, append([]string{"--address=" + p.sock, "--namespace=k8s.io"}, args...)...)
		return cmd.CombinedOutput()
	}
	if err := waitReady(ctx, cd, "serving on "+p.sock, componentTimeout, func(ctx context.Context) error {
		out, err := ctr(ctx, "version")
		if err != nil {
			return fmt.Errorf("ctr version: %v: %s", err, strings.TrimSpace(string(out)))
		}
		return nil
	}); err != nil {
		return err
	}
	for _, archive := range images {
		if out, err := ctr(ctx, "images", "import", "--platform=linux/"+runtime.GOARCH, archive); err != nil {
			return &ComponentError{Component: ContainerdComponent(n.Name), Log: cd.Log, Err: fmt.Errorf("import %s: %v: %s", archive, err, out)}
		}
	}

	// kubelet: cgroup v1 is accepted (failCgroupV1: false) since many machines still have it.
	// syncFrequency is 10s (default 1m): a kubelet retries a pod whose NodePrepareResources
	// failed (a plugin killed mid-prepare) only at its next resync, 60 to 90 s later
	// (kubernetes/kubernetes#139836), and the crash tests wait for three such retries.
	kc, err := u.componentKubeconfig(KubeletComponent(n.Name), "system:node:"+n.Name, "system:nodes")
	if err != nil {
		return err
	}
	kcfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /%s
containerRuntimeEndpoint: unix://%s
podLogsDir: %s
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %s}
authorization: {mode: Webhook}
failSwapOn: false
syncFrequency: 10s
maxPods: 20
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%%, imagefs.available: 1%%, nodefs.inodesFree: 1%%}
registerWithTaints:
- {key: %s, value: "true", effect: NoSchedule}
`, u.port("kubelet-"+n.Name), u.port("kubelet-healthz-"+n.Name), cgroupRootName(n.Name), p.sock,
		filepath.Join(p.kubelet, "pod-logs"), u.pki.CACert, RealNodeTaint)
	kcfgFile := filepath.Join(p.kubelet, "config.yaml")
	if err := os.WriteFile(kcfgFile, []byte(kcfg), 0o600); err != nil {
		return err
	}
	var labels []string
	for k, v := range n.Labels() {
		if k != LabelHostname {
			labels = append(labels, k+"="+v)
		}
	}
	labels = append(labels, LabelRealNode+"=true")
	slices.Sort(labels)
	kl, err := u.start(KubeletComponent(n.Name), []string{u.tc.Kubelet, "--config=" + kcfgFile, "--kubeconfig=" + kc,
		"--root-dir=" + kubeletRoot, "--cert-dir=" + filepath.Join(p.kubelet, "pki"),
		"--hostname-override=" + n.Name, "--node-ip=127.0.0.1", "--node-labels=" + strings.Join(labels, ","), "--v=2"},
		nil, map[string]int{"server": u.port("kubelet-" + n.Name), "healthz": u.port("kubelet-healthz-" + n.Name)})
	if err != nil {
		return err
	}
	if err := waitReady(ctx, kl, "registering node "+n.Name+" Ready", 2*componentTimeout, func(ctx context.Context) error {
		notReady, err := notReadyNodes(ctx, u.client, []Node{n})
		if err == nil && len(notReady) > 0 {
			err = fmt.Errorf("node %s not Ready yet", n.Name)
		}
		return err
	}); err != nil {
		return err
	}

	if u.chart() {
		// The chart's pool for this node: the kubelet runs its pod as a container.
		return waitReady(ctx, kl, "running the chart's gpudra-kubelet-plugin pod and publishing the ResourceSlices of node "+n.Name, 2*componentTimeout, func(ctx context.Context) error {
			if err := poolPublished(ctx, u.client, n.Name); err != nil {
				return fmt.Errorf("%w; plugin pod: %s", err, u.chartPodState(ctx, n.Name))
			}
			return nil
		})
	}
	// The plugin registers with this kubelet through its plugin registry.
	name := PluginComponent(n.Name)
	pkc, err := u.componentKubeconfig(name, nodeUserPrefix+n.Name, nodeGroup)
	if err != nil {
		return err
	}
	argv := u.pluginArgv(plugin, n, pkc)
	// Its DRA socket stays in <node>/plugin (a socket path must fit in 108 bytes, and with
	// rolling updates its name carries the pod UID); the kubelet finds it through the
	// registration in its plugin registry.
	argv = setFlag(argv, "--registrar-dir", filepath.Join(kubeletRoot, "plugins_registry"))
	// As in a DaemonSet pod: a UID of its own, so that a second plugin (a rolling update)
	// can register beside it.
	argv = append(argv, "--driver-root="+p.driverRoot, "--rolling-update-pod-uid="+string(uuid.NewUUID()))
	if u.tc.CDIHook != "" {
		argv = append(argv, "--nvidia-cdi-hook="+u.tc.CDIHook)
	}
	pc, err := u.start(name, argv, nil, map[string]int{"metrics": u.port("metrics-" + n.Name)})
	if err != nil {
		return err
	}
	return waitReady(ctx, pc, "publishing the ResourceSlices of node "+n.Name, componentTimeout, func(ctx context.Context) error {
		return poolPublished(ctx, u.client, n.Name)
	})
}

// setFlag replaces the value of --name=... in argv.
func setFlag(argv []string, name, value string) []string {
	for i, a := range argv {
		if strings.HasPrefix(a, name+"=") {
			argv[i] = name + "=" + value
		}
	}
	return argv
}

// makeFakeDriverRoot creates the device files gpudra's CDI specs reference, with NVIDIA's
// and DRM's numbers, under root/dev: NVIDIA's, and /dev/kfd, /dev/dri/renderD<128+i> and
// /dev/dri/card<i> for the AMD GPUs of a simulated KFD tree (whose render minors are 128
// on).
func makeFakeDriverRoot(root string) error {
	dev := filepath.Join(root, "dev")
	for _, d := range []string{"dri", "nvidia-caps"} {
		if err := os.MkdirAll(filepath.Join(dev, d), 0o755); err != nil {
			return err
		}
	}
	mk := func(name string, major, minor int) error {
		err := unix.Mknod(filepath.Join(dev, name), unix.S_IFCHR|0o666, int(unix.Mkdev(uint32(major), uint32(minor))))
		if errors.Is(err, os.ErrExist) {
			return nil
		}
		return err
	}
	for i := range fakeGPUs {
		if err := mk("nvidia"+strconv.Itoa(i), nvidiaMajor, i); err != nil {
			return err
		}
	}
	if err := mk("kfd", kfdMajor, 0); err != nil {
		return err
	}
	for i := range fakeGPUs {
		if err := mk("dri/renderD"+strconv.Itoa(128+i), drmMajor, 128+i); err != nil {
			return err
		}
		if err := mk("dri/card"+strconv.Itoa(i), drmMajor, i); err != nil {
			return err
		}
	}
	if err := mk("nvidiactl", nvidiaMajor, nvidiaCtlMinor); err != nil {
		return err
	}
	if err := mk("nvidia-uvm", nvidiaUVMMajor, 0); err != nil {
		return err
	}
	if err := mk("nvidia-uvm-tools", nvidiaUVMMajor, 1); err != nil {
		return err
	}
	for m := 1; m < fakeCapMinors; m++ {
		if err := mk("nvidia-caps/nvidia-cap"+strconv.Itoa(m), nvidiaCapsMajor, m); err != nil {
			return err
		}
	}
	return nil
}

// makeCgroupRoot creates the node's cgroup in every hierarchy (the kubelet requires its
// cgroupRoot to exist); a cpuset cgroup gets its parent's CPUs and memory nodes.
func makeCgroupRoot(name string) error {
	for _, h := range cgroupHierarchies() {
		d := filepath.Join("/sys/fs/cgroup", h, name)
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create cgroup %s: %w", d, err)
		}
		if h == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpuset", f))
				if err == nil {
					err = os.WriteFile(filepath.Join(d, f), v, 0o644)
				}
				if err != nil {
					return fmt.Errorf("cgroup %s: %s: %w", d, f, err)
				}
			}
		}
	}
	return nil
}

// stopLab stops a lab's processes. Real nodes go first: their kubelets, then every container
// (runc delete --force, which also kills it), so that nothing outlives containerd; then
// everything else, API server clients before the API server before etcd; last, what the real
// nodes left in the kernel: container shims, mounts under the lab folder, cgroups, bridges.
func stopLab(s *State) error {
	real := s.RealNodes()
	var kubelets []Component
	for _, n := range real {
		if c := s.Component(KubeletComponent(n.Name)); c != nil {
			kubelets = append(kubelets, *c)
		}
	}
	err := stopProcesses(kubelets, 20*time.Second)
	l := Layout{s.Dir}
	for _, n := range real {
		removeContainers(s, n.Name)
	}
	err = errors.Join(err, stopInTiers(s.Components))
	for _, n := range real {
		idx := realNodeIndex(s.Nodes, n.Name)
		err = errors.Join(err, cleanRealNode(l, n.Name, idx))
		if left := realNodeLeftovers(l, n.Name, idx); len(left) > 0 {
			err = errors.Join(err, fmt.Errorf("real node %s left behind: %s", n.Name, strings.Join(left, "; ")))
		}
	}
	return err
}

// realNodeLeftovers lists what of a stopped real node is still in the kernel: mounts under
// its folder, processes of its containerd (shims, containers in its cgroups), its cgroups
// and its bridge. `lab down` fails while any is left, so the e2e suite notices a leak.
func realNodeLeftovers(l Layout, node string, idx int) []string {
	p := l.realNode(node)
	var out []string
	mps, _ := mountsUnder(p.dir)
	for _, mp := range mps {
		out = append(out, "mount "+mp)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		if data, err := os.ReadFile(f); err == nil && strings.Contains(string(data), p.sock) {
			out = append(out, "process "+filepath.Base(filepath.Dir(f))+" ("+strings.ReplaceAll(strings.TrimRight(string(data), "\x00"), "\x00", " ")+")")
		}
	}
	for _, h := range cgroupHierarchies() {
		if d := filepath.Join("/sys/fs/cgroup", h, cgroupRootName(node)); exists(d) {
			out = append(out, "cgroup "+d)
		}
	}
	if idx >= 0 && exists("/sys/class/net/"+bridgeName(idx)) {
		out = append(out, "bridge "+bridgeName(idx))
	}
	return out
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// removeContainers deletes every container runc knows under the node's runc root. runc is
// the toolchain's, beside the node's containerd.
func removeContainers(s *State, node string) {
	cd := s.Component(ContainerdComponent(node))
	if cd == nil || len(cd.Argv) == 0 {
		return
	}
	runc := filepath.Join(filepath.Dir(cd.Argv[0]), "runc")
	roots, _ := filepath.Glob(filepath.Join(Layout{s.Dir}.realNode(node).runcRoot, "*"))
	for _, root := range roots {
		out, err := exec.Command(runc, "--root", root, "list", "-q").Output()
		if err != nil {
			continue
		}
		for _, id := range strings.Fields(string(out)) {
			if msg, err := exec.Command(runc, "--root", root, "delete", "--force", id).CombinedOutput(); err != nil {
				klog.InfoS("runc delete failed", "container", id, "err", err, "output", string(msg))
			}
		}
	}
}

// cleanRealNode removes what a stopped real node leaves outside its processes.
func cleanRealNode(l Layout, node string, idx int) error {
	p := l.realNode(node)
	killShims(p.sock)
	var errs []error
	if err := unmountUnder(p.dir); err != nil {
		errs = append(errs, err)
	}
	for _, h := range cgroupHierarchies() {
		if err := removeCgroupTree(filepath.Join("/sys/fs/cgroup", h, cgroupRootName(node))); err != nil {
			errs = append(errs, err)
		}
	}
	if idx >= 0 {
		if _, err := os.Stat("/sys/class/net/" + bridgeName(idx)); err == nil {
			if out, err := exec.Command("ip", "link", "delete", bridgeName(idx)).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("delete bridge %s: %v: %s", bridgeName(idx), err, out))
			}
		}
	}
	// libcni caches each attachment's result outside any configurable folder.
	cached, _ := filepath.Glob("/var/lib/cni/results/gpudra-lab-" + node + "-*")
	for _, f := range cached {
		_ = os.Remove(f)
	}
	return errors.Join(errs...)
}

// killShims kills containerd shims still serving the containerd at sock (containerd does not
// stop them on exit; they normally exit when their last container is deleted).
func killShims(sock string) {
	shims := func() []int {
		var pids []int
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, f := range procs {
			data, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			args := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
			if len(args) == 0 || !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") || !slices.Contains(args, sock) {
				continue
			}
			if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(f))); err == nil {
				pids = append(pids, pid)
			}
		}
		return pids
	}
	for _, pid := range shims() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	// Wait for them to be gone (a killed process lingers a moment), so that the leftover
	// check after this does not see one on its way out.
	for i := 0; i < 50 && len(shims()) > 0; i++ {
		time.Sleep(100 * time.Millisecond)
	}
}

// sharedBindMount binds dir onto itself and makes that mount shared (unmountUnder undoes it).
func sharedBindMount(dir string) error {
	if err := unix.Mount(dir, dir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind mount %s: %w", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s a shared mount: %w", dir, err)
	}
	return nil
}

// mountsUnder lists the mount points at or below dir.
func mountsUnder(dir string) ([]string, error) {
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return nil, err
	}
	mps := make([]string, len(mounts))
	for i, m := range mounts {
		mps[i] = m.Mountpoint
	}
	return mps, nil
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) error {
	mps, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	slices.SortFunc(mps, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	var errs []error
	for _, mp := range slices.Compact(mps) {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", mp, err))
		}
	}
	return errors.Join(errs...)
}

// removeCgroupTree removes a cgroup and its descendants, deepest first (a cgroup can only be
// removed once it has no processes and no children).
func removeCgroupTree(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var dirs []string
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	slices.Reverse(dirs)
	var errs []error
	for _, d := range dirs {
		var err error
		for range 50 { // a killed process leaves its cgroup a moment later
			if err = unix.Rmdir(d); err == nil || errors.Is(err, unix.ENOENT) {
				err = nil
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// RealNodeAvailable reports whether the lab runs a real node, and if not, why.
func (s *State) RealNodeAvailable() (string, error) {
	if real := s.RealNodes(); len(real) > 0 {
		return real[0].Name, nil
	}
	if s.RealNodesLeftOut != "" {
		return "", errors.New(s.RealNodesLeftOut)
	}
	return "", errors.New("the lab file has no real node (a node with real: true)")
}

// KubeletRegistryDir is a real node's kubelet plugin registry.
func (s *State) KubeletRegistryDir(node string) string {
	return filepath.Join(Layout{s.Dir}.realNode(node).kubelet, "root", "plugins_registry")
}

// KubeletLog is the log of a real node's kubelet.
func (s *State) KubeletLog(node string) string { return Layout{s.Dir}.Log(KubeletComponent(node)) }

// PodLog returns what a container of a pod on a real node has written so far (stdout and
// stderr, from the kubelet's container log; the newest run of the container). The kubelet
// serves only 127.0.0.1, which it refuses to report as the node's address, so the API
// server cannot proxy `kubectl logs` to it; the lab reads the log files instead.
func PodLog(s *State, node, namespace, pod, container string) (string, error) {
	dirs, _ := filepath.Glob(filepath.Join(Layout{s.Dir}.realNode(node).kubelet, "pod-logs", namespace+"_"+pod+"_*", container))
	if len(dirs) == 0 {
		return "", fmt.Errorf("no log of container %s of pod %s/%s on node %s yet", container, namespace, pod, node)
	}
	files, _ := filepath.Glob(filepath.Join(dirs[len(dirs)-1], "*.log"))
	if len(files) == 0 {
		return "", fmt.Errorf("no log of container %s of pod %s/%s on node %s yet", container, namespace, pod, node)
	}
	// <n>.log is the n-th run; the newest has the highest n.
	slices.SortFunc(files, func(a, b string) int {
		na, _ := strconv.Atoi(strings.TrimSuffix(filepath.Base(a), ".log"))
		nb, _ := strconv.Atoi(strings.TrimSuffix(filepath.Base(b), ".log"))
		return na - nb
	})
	data, err := os.ReadFile(files[len(files)-1])
	if err != nil {
		return "", err
	}
	return criLogText(string(data)), nil
}

// criLogText joins the text of CRI log lines ("<time> <stream> <P|F> <text>"; P is a
// partial line continued by the next).
func criLogText(log string) string {
	var b strings.Builder
	for _, line := range strings.Split(log, "\n") {
		parts := strings.SplitN(line, " ", 4)
		if len(parts) < 4 {
			continue
		}
		b.WriteString(parts[3])
		if parts[2] != "P" {
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// realNodeTolerations let a pod onto a real node.
var realNodeTolerations = []corev1.Toleration{{Key: RealNodeTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}

// RealNodePod is a pod that runs the probe image on the named real node with the given
// resource claims (each a ResourceClaimTemplate or ResourceClaim name).
func RealNodePod(namespace, name, node string, claims []corev1.PodResourceClaim) *corev1.Pod {
	var refs []corev1.ResourceClaim
	for _, c := range claims {
		refs = append(refs, corev1.ResourceClaim{Name: c.Name})
	}
	f := false
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{LabelHostname: node},
			Tolerations:                   realNodeTolerations,
			AutomountServiceAccountToken:  &f,
			TerminationGracePeriodSeconds: new(int64),
			ResourceClaims:                claims,
			Containers: []corev1.Container{{
				Name: "probe", Image: ProbeImage, ImagePullPolicy: corev1.PullNever,
				Resources: corev1.ResourceRequirements{Claims: refs},
			}},
		},
	}
}
