package usage

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// DefaultPodResourcesSocket is where the kubelet serves its PodResources API.
const DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// Config is how the plugin finds what the prepared claims use: NVML lists each
// GPU's compute processes, /proc/<pid>/cgroup names the pod each runs in, the claims'
// status.reservedFor names those pods, and the kubelet's PodResources API says which
// claims the pods' containers were given.
type Config struct {
	// PodResourcesSocket is the kubelet's PodResources socket; "" is
	// DefaultPodResourcesSocket.
	PodResourcesSocket string
	// PodResources, when set, is asked instead of a client of PodResourcesSocket.
	PodResources podresourcesapi.PodResourcesListerClient
	// ProcRoot is where the host's /proc is seen; "" is /proc.
	ProcRoot string
	// ProcessesFile, with a simulated backend only, is the file the simulated GPUs take
	// their processes from (nvmlsim.SetProcessesFile); "" is
	// <PluginDataDir>/processes with a simulated backend.
	ProcessesFile string
	// Disabled turns the sampling off: no usage metrics, and no usage in the claims'
	// status.devices.
	Disabled bool
	// Now tells the time of samples; nil is time.Now (tests).
	Now func() time.Time
}

// Node is what the sampler reads of the plugin's core.
type Node interface {
	// Prepared returns the node's GPUs and its completed claims, copies sorted by
	// namespace and name.
	Prepared() ([]driver.GPU, []*prepared.Claim)
}

// usageCacheAge is how long a sample serves scrapes before NVML is asked again.
const usageCacheAge = 5 * time.Second

// claimGPUUsage is what one prepared claim uses, and may use, on one GPU.
type claimGPUUsage struct {
	Namespace, Name string
	UID             types.UID
	GPU             int
	// MemoryUsed is the memory its processes use; MemoryLimit what its devices hold on
	// the GPU (the share's memory, or the device's). MemoryKnown is false where NVML has
	// no value for a process's memory (VALUE_NOT_AVAILABLE): then MemoryUsed is unknown.
	MemoryUsed, MemoryLimit int64
	MemoryKnown             bool
	// SMUtil is its processes' SM utilization in percent of the GPU; SMKnown is false
	// where NVML does not sample per-process utilization (MIG).
	SMUtil  int
	SMKnown bool
	// Share is set when it holds a share of the GPU; then Guarantee is the compute its
	// shares reserve and Cap the compute they may use, in percent of the GPU.
	Share          bool
	Guarantee, Cap int
	Processes      int
	// Priority is its shares' priority on the GPU (High if any is, Low if all are, else
	// ""), and HAMi whether HAMi-core enforces them, whose priority holds Low tasks back
	// while a High one runs.
	Priority string
	HAMi     bool
	// HeldBack is the time, summed since it was prepared, its Low HAMi-core share had
	// processes on the GPU while a High HAMi-core share there was busy (heldBack).
	HeldBack time.Duration
}

// gpuProcessUsage is what all the processes of one GPU use.
type gpuProcessUsage struct {
	GPU         int
	MemoryUsed  int64
	MemoryKnown bool
	SMUtil      int
	SMKnown     bool
	// Unclaimed counts the processes that belong to no prepared claim.
	Unclaimed int
}

// Snapshot is one sample of the node's GPU processes, attributed to the prepared claims.
type Snapshot struct {
	claims []claimGPUUsage // sorted by namespace, name, GPU
	gpus   []gpuProcessUsage
	memory map[int]int64 // GPU index → its memory
}

// gpuProcess is one process NVML reports on a GPU; memKnown is false where NVML has no
// value for its memory.
type gpuProcess struct {
	pid      uint32
	memory   int64
	memKnown bool
	sm       int
	smKnown  bool
}

// processMemory is a process's used GPU memory as NVML reports it, and whether NVML knows
// it: NVML answers VALUE_NOT_AVAILABLE (all bits set) where it cannot tell (without the
// privilege to see other containers' processes, on some MIG devices), which read as a
// number would be 16 EiB. No GPU has memory past int64 bytes, so no larger value is one.
func processMemory(used uint64) (int64, bool) {
	if used == uint64(math.MaxUint64) || used > math.MaxInt64 {
		return 0, false
	}
	return int64(used), true
}

// maxSMUtil is the most SM utilization, in percent, a process sample can say.
const maxSMUtil = 100

// Sampler samples the GPUs' processes, at most every usageCacheAge.
type Sampler struct {
	node   Node
	lib    nvml.Interface
	owners *processOwners
	logger klog.Logger

	mu       sync.Mutex
	at       time.Time
	last     *Snapshot
	lastSeen map[int]uint64 // GPU index → newest utilization sample's timestamp
	now      func() time.Time
	held     heldBack
}

// Snapshot returns the latest sample, taking a new one when it is older than
// usageCacheAge.
func (u *Sampler) Snapshot(ctx context.Context) *Snapshot {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.last != nil && u.now().Sub(u.at) < usageCacheAge {
		return u.last
	}
	u.last = u.take(ctx)
	u.at = u.now()
	u.held.account(u.last, u.at)
	return u.last
}

// Expire drops the latest sample: the next scrape or status write samples the GPUs
// again.
func (u *Sampler) Expire() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.last = nil
}

// readProcesses asks NVML for GPU g's processes and their SM utilization; listed is
// false where NVML could not list them (ERROR_NOT_SUPPORTED, ...): then their memory is
// unknown, not 0.
func (u *Sampler) readProcesses(g driver.GPU) (procs []gpuProcess, smKnown, listed bool) {
	dev, ret := u.lib.DeviceGetHandleByUUID(g.UUID)
	if ret != nvml.SUCCESS {
		u.logger.V(4).Info("No handle for a GPU's processes", "gpu", g.Index, "return", ret)
		return nil, false, false
	}
	infos, ret := dev.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		u.logger.V(4).Info("Reading a GPU's processes failed", "gpu", g.Index, "return", ret)
		return nil, false, false
	}
	if u.lastSeen == nil {
		u.lastSeen = map[int]uint64{}
	}
	since := u.lastSeen[g.Index]
	if floor := uint64(time.Now().Add(-2 * usageCacheAge).UnixMicro()); since < floor {
		since = floor
	}
	sm := map[uint32]nvml.ProcessUtilizationSample{}
	smKnown = true
	samples, ret := dev.GetProcessUtilization(since)
	switch ret {
	case nvml.SUCCESS, nvml.ERROR_INSUFFICIENT_SIZE: // go-nvml's answer when there are none
		for _, s := range samples {
			if s.SmUtil > maxSMUtil { // not a percent: NVML has no value
				smKnown = false
			}
			if s.TimeStamp >= sm[s.Pid].TimeStamp {
				sm[s.Pid] = s
			}
			u.lastSeen[g.Index] = max(u.lastSeen[g.Index], s.TimeStamp)
		}
	case nvml.ERROR_NOT_FOUND: // no samples since: the processes were idle
	default:
		smKnown = false
	}
	if !smKnown {
		clear(sm)
	}
	for _, p := range infos {
		mem, memKnown := processMemory(p.UsedGpuMemory)
		if !memKnown {
			u.logger.V(4).Info("NVML has no value for a process's GPU memory", "gpu", g.Index, "pid", p.Pid)
		}
		procs = append(procs, gpuProcess{pid: p.Pid, memory: mem, memKnown: memKnown, sm: int(sm[p.Pid].SmUtil), smKnown: smKnown})
	}
	return procs, smKnown, true
}

// take samples every GPU and attributes its processes to the prepared claims.
func (u *Sampler) take(ctx context.Context) *Snapshot {
	gpus, claims := u.node.Prepared()
	byGPU := map[int][]gpuProcess{}
	smKnown, listed := map[int]bool{}, map[int]bool{}
	var pids []uint32
	for _, g := range gpus {
		procs, known, ok := u.readProcesses(g)
		byGPU[g.Index], smKnown[g.Index], listed[g.Index] = procs, known, ok
		for _, p := range procs {
			pids = append(pids, p.pid)
		}
	}
	owners := u.owners.claimsOf(ctx, pids, claims)
	memOf := map[int]int64{}
	for _, g := range gpus {
		memOf[g.Index] = int64(g.MemoryBytes)
	}

	snap := &Snapshot{memory: memOf}
	// What each claim's devices hold on each GPU.
	at := map[types.UID]map[int]int{} // claim → GPU → position in snap.claims
	for _, pc := range claims {
		for _, d := range pc.Devices {
			for _, idx := range d.GPUs {
				if _, ok := memOf[idx]; !ok {
					continue
				}
				if at[pc.UID] == nil {
					at[pc.UID] = map[int]int{}
				}
				k, ok := at[pc.UID][idx]
				if !ok {
					k = len(snap.claims)
					at[pc.UID][idx] = k
					snap.claims = append(snap.claims, claimGPUUsage{Namespace: pc.Namespace, Name: pc.Name, UID: pc.UID, GPU: idx, MemoryKnown: listed[idx], SMKnown: smKnown[idx]})
				}
				c := &snap.claims[k]
				limit := d.CDI.MemoryBytes
				if len(d.GPUs) > 1 || limit == 0 {
					limit = memOf[idx] // an NVLink group holds each of its GPUs whole
				}
				c.MemoryLimit += limit
				if d.Type == api.TypeShare {
					first := !c.Share
					c.Share = true
					c.Guarantee += d.CDI.ComputePercent
					capPct := 100
					if l := d.CDI.Limits; l != nil && l.ComputePercent > 0 {
						capPct = l.ComputePercent
					}
					c.Cap = min(100, c.Cap+capPct)
					var prio string
					hami := false
					if l := d.CDI.Limits; l != nil {
						prio, hami = l.Priority, l.HAMi
					}
					switch {
					case first:
						c.Priority, c.HAMi = prio, hami
					case prio == string(api.PriorityHigh) || c.Priority == string(api.PriorityHigh):
						c.Priority, c.HAMi = string(api.PriorityHigh), c.HAMi || hami
					case prio != c.Priority:
						c.Priority = ""
					}
				}
			}
		}
	}
	for _, g := range gpus {
		total := gpuProcessUsage{GPU: g.Index, MemoryKnown: listed[g.Index], SMKnown: smKnown[g.Index]}
		for _, p := range byGPU[g.Index] {
			total.MemoryUsed += p.memory
			total.MemoryKnown = total.MemoryKnown && p.memKnown
			total.SMUtil += p.sm
			claimed := false
			for _, uid := range owners[p.pid] {
				k, ok := at[uid][g.Index]
				if !ok {
					continue
				}
				c := &snap.claims[k]
				c.MemoryUsed += p.memory
				c.MemoryKnown = c.MemoryKnown && p.memKnown
				c.SMUtil += p.sm
				c.Processes++
				claimed = true
			}
			if !claimed {
				total.Unclaimed++
			}
		}
		total.SMUtil = min(total.SMUtil, 100)
		snap.gpus = append(snap.gpus, total)
	}
	for k := range snap.claims {
		snap.claims[k].SMUtil = min(snap.claims[k].SMUtil, 100)
	}
	return snap
}

// New builds the sampler of the GPUs lib serves, which attributes their processes to
// node's prepared claims, reading the claims' consumers with client (nil: none); nil when
// cfg disables it.
func New(cfg Config, lib nvml.Interface, client kubernetes.Interface, node Node, logger klog.Logger) *Sampler {
	if cfg.Disabled || lib == nil {
		return nil
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &Sampler{node: node, lib: lib, logger: logger, owners: newProcessOwners(cfg, client, logger), now: now}
}
