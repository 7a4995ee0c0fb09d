package usage

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// reservedForAge is how long a claim's status.reservedFor, as read from the API
// server, is taken as the pods using it.
const reservedForAge = 30 * time.Second

// podResourcesTimeout bounds one PodResources List.
const podResourcesTimeout = 2 * time.Second

// processOwners finds the prepared claims GPU processes run for: /proc/<pid>/cgroup
// names the process's pod (by UID) and container; the claims' status.reservedFor
// names the pods each claim is reserved for; the kubelet's PodResources API confirms
// that a container of the pod was given the claim. A process counts for every claim
// of its pod with a device on the process's GPU.
type processOwners struct {
	client kubernetes.Interface
	proc   string
	lister podresourcesapi.PodResourcesListerClient
	socket string
	logger klog.Logger

	mu       sync.Mutex
	reserved map[types.UID]reservation // by claim UID
	dialed   bool
	failing  bool // the last List failed (logged once)
}

// reservation is a claim's status.reservedFor pods as read at a time.
type reservation struct {
	at   time.Time
	pods []resourceapi.ResourceClaimConsumerReference
}

func newProcessOwners(cfg Config, client kubernetes.Interface, logger klog.Logger) *processOwners {
	o := &processOwners{client: client, proc: cfg.ProcRoot, lister: cfg.PodResources,
		socket: cfg.PodResourcesSocket, logger: logger, reserved: map[types.UID]reservation{}}
	if o.proc == "" {
		o.proc = "/proc"
	}
	if o.socket == "" {
		o.socket = DefaultPodResourcesSocket
	}
	return o
}

// podOfProcess reads the pod UID and container ID of a process from its cgroup; ""
// for a process outside any pod (or gone).
func podOfProcess(proc string, pid uint32) (pod types.UID, container string) {
	data, err := os.ReadFile(filepath.Join(proc, strconv.FormatUint(uint64(pid), 10), "cgroup"))
	if err != nil {
		return "", ""
	}
	return parsePodCgroup(data)
}

// podSegment matches a kubelet pod cgroup: "pod<uid>" (cgroupfs) or
// "kubepods-<qos>-pod<uid with _>.slice" (systemd).
var podSegment = regexp.MustCompile(`(?:^|-)pod([0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12})(?:\.slice)?$`)

// parsePodCgroup reads /proc/<pid>/cgroup (v1 or v2): the pod UID of the kubepods
// segment and the container ID of the segment below it ("cri-containerd-<id>.scope",
// "crio-<id>.scope", "docker-<id>.scope" or "<id>").
func parsePodCgroup(data []byte) (types.UID, string) {
	lines := bufio.NewScanner(bytes.NewReader(data))
	for lines.Scan() {
		fields := strings.SplitN(lines.Text(), ":", 3)
		if len(fields) != 3 {
			continue
		}
		segs := strings.Split(fields[2], "/")
		for k, s := range segs {
			m := podSegment.FindStringSubmatch(s)
			if m == nil {
				continue
			}
			uid := types.UID(strings.ReplaceAll(m[1], "_", "-"))
			var container string
			if k+1 < len(segs) {
				container = strings.TrimSuffix(segs[k+1], ".scope")
				if i := strings.LastIndex(container, "-"); i >= 0 {
					container = container[i+1:]
				}
			}
			return uid, container
		}
	}
	return "", ""
}

// reservedFor returns the pods the claim is reserved for, reading the claim again
// when what was read is older than reservedForAge; nil without an API client.
func (o *processOwners) reservedFor(ctx context.Context, pc *prepared.Claim) []resourceapi.ResourceClaimConsumerReference {
	if o.client == nil {
		return nil
	}
	o.mu.Lock()
	r, ok := o.reserved[pc.UID]
	o.mu.Unlock()
	if ok && time.Since(r.at) < reservedForAge {
		return r.pods
	}
	c, err := o.client.ResourceV1().ResourceClaims(pc.Namespace).Get(ctx, pc.Name, metav1.GetOptions{})
	if err != nil {
		o.logger.V(4).Info("Reading a claim's consumers failed", "claim", klog.KRef(pc.Namespace, pc.Name), "err", err)
		return r.pods // what was read before, if anything
	}
	var pods []resourceapi.ResourceClaimConsumerReference
	if c.UID == pc.UID {
		for _, ref := range c.Status.ReservedFor {
			if ref.Resource == "pods" && ref.APIGroup == "" {
				pods = append(pods, ref)
			}
		}
	}
	o.mu.Lock()
	o.reserved[pc.UID] = reservation{at: time.Now(), pods: pods}
	o.mu.Unlock()
	return pods
}

// forget drops what was read of claims that are no longer prepared.
func (o *processOwners) forget(claims []*prepared.Claim) {
	keep := map[types.UID]bool{}
	for _, pc := range claims {
		keep[pc.UID] = true
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for uid := range o.reserved {
		if !keep[uid] {
			delete(o.reserved, uid)
		}
	}
}

// podClaims asks the kubelet which gpudra claims each pod's containers hold:
// "namespace/pod" → "namespace/claim" set. nil when the kubelet cannot say (no socket,
// or a kubelet without DRA in its PodResources API).
func (o *processOwners) podClaims(ctx context.Context) map[string]map[string]bool {
	o.mu.Lock()
	if o.lister == nil && !o.dialed {
		o.dialed = true
		if _, err := os.Stat(o.socket); err == nil {
			conn, err := grpc.NewClient("unix://"+o.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err == nil {
				o.lister = podresourcesapi.NewPodResourcesListerClient(conn)
			} else {
				o.logger.Info("The kubelet's PodResources API is not used", "socket", o.socket, "err", err)
			}
		} else {
			o.logger.Info("The kubelet's PodResources API is not used; processes are matched to claims by the pods they are reserved for", "socket", o.socket, "err", err)
		}
	}
	lister := o.lister
	o.mu.Unlock()
	if lister == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, podResourcesTimeout)
	defer cancel()
	resp, err := lister.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	o.mu.Lock()
	first := err != nil && !o.failing
	o.failing = err != nil
	o.mu.Unlock()
	if err != nil {
		if first {
			o.logger.Error(err, "Listing the kubelet's pod resources failed; processes are matched to claims by the pods they are reserved for", "socket", o.socket)
		}
		return nil
	}
	out := map[string]map[string]bool{}
	for _, pod := range resp.GetPodResources() {
		key := pod.GetNamespace() + "/" + pod.GetName()
		for _, c := range pod.GetContainers() {
			for _, dr := range c.GetDynamicResources() {
				for _, r := range dr.GetClaimResources() {
					if r.GetDriverName() != api.DriverName {
						continue
					}
					if out[key] == nil {
						out[key] = map[string]bool{}
					}
					out[key][dr.GetClaimNamespace()+"/"+dr.GetClaimName()] = true
				}
			}
		}
	}
	return out
}

// claimsOf returns, by pid, the UIDs of the prepared claims the process runs for.
func (o *processOwners) claimsOf(ctx context.Context, pids []uint32, claims []*prepared.Claim) map[uint32][]types.UID {
	o.forget(claims)
	if len(pids) == 0 || len(claims) == 0 {
		return nil
	}
	type podClaim struct {
		uid      types.UID
		pod, key string // namespace/pod, namespace/claim
	}
	byPod := map[types.UID][]podClaim{}
	for _, pc := range claims {
		for _, ref := range o.reservedFor(ctx, pc) {
			byPod[ref.UID] = append(byPod[ref.UID], podClaim{uid: pc.UID, pod: pc.Namespace + "/" + ref.Name, key: pc.Namespace + "/" + pc.Name})
		}
	}
	if len(byPod) == 0 {
		return nil
	}
	given := o.podClaims(ctx)
	out := map[uint32][]types.UID{}
	for _, pid := range pids {
		pod, _ := podOfProcess(o.proc, pid)
		if pod == "" {
			continue
		}
		for _, c := range byPod[pod] {
			if given != nil && !given[c.pod][c.key] {
				continue // the kubelet gave the claim to none of the pod's containers
			}
			out[pid] = append(out[pid], c.uid)
		}
	}
	return out
}
