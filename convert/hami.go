package convert

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// HAMi's pod API: the container resources and pod annotations HAMi's scheduler and device
// plugin read. A pod that uses any of them is converted into a gpudra claim: the card
// choices become CEL selectors, memory and compute a share's capacity requests.
const (
	HAMiMemory        = "nvidia.com/gpumem"            // MiB of each GPU
	HAMiMemoryPercent = "nvidia.com/gpumem-percentage" // percent of each GPU's memory
	HAMiCores         = "nvidia.com/gpucores"          // percent of each GPU's SMs
	HAMiPriority      = "nvidia.com/priority"          // 0: high, 1: low

	HAMiUseType    = "nvidia.com/use-gputype"
	HAMiNoUseType  = "nvidia.com/nouse-gputype"
	HAMiUseUUID    = "nvidia.com/use-gpuuuid"
	HAMiNoUseUUID  = "nvidia.com/nouse-gpuuuid"
	HAMiGPUPolicy  = "hami.io/gpu-scheduler-policy"
	HAMiNodePolicy = "hami.io/node-scheduler-policy"

	hamiDomain = "hami.io/"
)

// hamiResources are the container resources only HAMi serves.
var hamiResources = []string{HAMiMemory, HAMiMemoryPercent, HAMiCores, HAMiPriority}

// hamiAnnotations are the pod annotations in nvidia.com that HAMi reads, in the order the
// report names them.
var hamiAnnotations = []string{HAMiUseType, HAMiNoUseType, HAMiUseUUID, HAMiNoUseUUID}

// hamiAnnotation reports whether a pod annotation is HAMi's.
func hamiAnnotation(k string) bool {
	return slices.Contains(hamiAnnotations, k) || strings.HasPrefix(k, hamiDomain)
}

// Accepted ranges of HAMi's quantities.
const (
	maxHAMiMemoryMiB = 1 << 20 // 1 TiB
	maxPercent       = 100
)

// HAMiContainer holds one container's HAMi resources as written; "" where absent.
type HAMiContainer struct {
	GPU, Memory, MemoryPercent, Cores, Priority string
}

// asks reports whether the container asks HAMi or the device plugin for anything.
func (h HAMiContainer) asks() bool {
	return h.GPU != "" || h.Memory != "" || h.MemoryPercent != "" || h.Cores != "" || h.Priority != ""
}

// Finding is what happened to one HAMi name: its field (a resource or annotation name),
// its level, and why.
type Finding struct {
	Field   string
	Level   Level
	Message string
}

// HAMiRequest converts one container's HAMi resources, under the pod's selectors (from
// HAMiSelectors), into a request for gpudra's devices:
//
//   - nvidia.com/gpu alone (or with gpumem-percentage 100): whole GPUs of gpu.gpudra.dev;
//   - with nvidia.com/gpumem: shares of gpu-share.gpudra.dev, each asking that many MiB and
//     nvidia.com/gpucores percent of the SMs;
//   - nvidia.com/gpu missing beside gpumem or gpucores: one, as HAMi counts it.
//
// findings say what each resource became; errs name a resource whose value is out of range
// or cannot be carried over. The result is meaningful only without errs.
func HAMiRequest(h HAMiContainer, selectors []string) (ask HAMiAsk, findings, errs []Finding) {
	req := &ask.Request
	bad := func(field, format string, args ...any) {
		errs = append(errs, Finding{field, NotConverted, fmt.Sprintf(format, args...)})
	}
	count := int64(1)
	if h.GPU != "" {
		n, ok := deviceCount(h.GPU)
		if !ok {
			bad(dpGPU, "%q: want a whole number of GPUs from 1 to %d", h.GPU, maxDevices)
		}
		count = n
	}
	mem, memSet := int64(0), h.Memory != ""
	if memSet {
		var ok bool
		if mem, ok = wholeNumber(h.Memory, 1, maxHAMiMemoryMiB); !ok {
			bad(HAMiMemory, "%q: want a whole number of MiB from 1 to %d", h.Memory, maxHAMiMemoryMiB)
		}
	}
	pct, pctSet := int64(maxPercent), h.MemoryPercent != ""
	if pctSet {
		var ok bool
		if pct, ok = wholeNumber(h.MemoryPercent, 1, maxPercent); !ok {
			bad(HAMiMemoryPercent, "%q: want a whole number of percent from 1 to %d", h.MemoryPercent, maxPercent)
		}
	}
	cores, coresSet := int64(0), h.Cores != ""
	if coresSet {
		var ok bool
		if cores, ok = wholeNumber(h.Cores, 0, maxPercent); !ok {
			bad(HAMiCores, "%q: want a whole number of percent of the GPU's SMs from 0 to %d", h.Cores, maxPercent)
		}
	}
	if memSet && pctSet {
		bad(HAMiMemoryPercent, "set beside %s: ask for a GPU's memory one way, in MiB (%s) or in percent (%s)", HAMiMemory, HAMiMemory, HAMiMemoryPercent)
	}
	prio, prioSet := int64(0), h.Priority != ""
	if prioSet {
		var ok bool
		if prio, ok = wholeNumber(h.Priority, 0, 1); !ok {
			bad(HAMiPriority, "%q: want 0 (high) or 1 (low)", h.Priority)
		}
	}
	if len(errs) > 0 {
		return ask, nil, errs
	}
	if !memSet && pct < maxPercent {
		bad(HAMiMemoryPercent, "%d: a gpudra share asks for its memory as a quantity, and the card it lands on is not known before scheduling; ask for the memory in MiB with %s (or 100 percent: a whole GPU)", pct, HAMiMemory)
		return ask, nil, errs
	}

	// Written out as the API server defaults it, so that a template created from it reads
	// back equal.
	req.AllocationMode, req.Count = resourceapi.DeviceAllocationModeExactCount, count
	switch {
	case memSet:
		req.DeviceClassName = api.DeviceClassShare
		caps := map[resourceapi.QualifiedName]resource.Quantity{api.CapMemory: *resource.NewQuantity(mem<<20, resource.BinarySI)}
		if coresSet {
			caps[api.CapCompute] = *resource.NewQuantity(cores, resource.DecimalSI)
		}
		req.Capacity = &resourceapi.CapacityRequirements{Requests: caps}
		ask.Distinct = count > 1
		if prioSet {
			ask.Priority = api.PriorityHigh
			if prio == 1 {
				ask.Priority = api.PriorityLow
			}
			findings = append(findings, Finding{HAMiPriority, Converted, fmt.Sprintf("%d → limits.priority %s in a GpuConfig for the request (HAMi-core's CUDA_TASK_PRIORITY %d under HAMi-core enforcement)", prio, ask.Priority, prio)})
		}
		note := ""
		if mem<<20 < minShareMemory {
			note = "; shares start at 256Mi, so it consumes 256Mi"
		}
		findings = append(findings, Finding{HAMiMemory, Converted, fmt.Sprintf("%d MiB → capacity.requests.memory %s of each of %d × %s%s", mem, capMemory(mem), count, api.DeviceClassShare, note)})
		if coresSet {
			what := fmt.Sprintf("%d percent of the SMs, enforced in the container", cores)
			if cores == 0 {
				what = "no compute cap and no reservation (HAMi's 0)"
			}
			findings = append(findings, Finding{HAMiCores, Converted, fmt.Sprintf("%d → capacity.requests.compute %d: %s", cores, cores, what)})
		}
	default:
		req.DeviceClassName = api.DeviceClassGPU
		if pctSet {
			findings = append(findings, Finding{HAMiMemoryPercent, Converted, fmt.Sprintf("100 → a whole GPU (%s): all of its memory", api.DeviceClassGPU)})
		}
		if coresSet {
			if cores == 0 || cores == maxPercent {
				findings = append(findings, Finding{HAMiCores, Converted, fmt.Sprintf("%d → a whole GPU (%s): all of its SMs", cores, api.DeviceClassGPU)})
			} else {
				findings = append(findings, Finding{HAMiCores, NotConverted, fmt.Sprintf("%d: without %s the container asks HAMi for all of a GPU's memory, which gpudra gives as a whole GPU (%s), whose SMs it does not cap: the container gets all of them; ask for %s too to get a share capped at %d percent", cores, HAMiMemory, api.DeviceClassGPU, HAMiMemory, cores)})
			}
		}
		if prioSet {
			findings = append(findings, Finding{HAMiPriority, NotConverted, fmt.Sprintf("%d: a priority ranks the shares of one GPU, and without %s the container gets a whole GPU, which it shares with no one", prio, HAMiMemory)})
		}
	}
	if h.GPU == "" {
		findings = append(findings, Finding{dpGPU, Converted, fmt.Sprintf("not set: 1 GPU, as HAMi counts a container that asks for %s without it", strings.Join(hamiResources[:3], " or "))})
	} else {
		findings = append(findings, Finding{dpGPU, Converted, fmt.Sprintf("%d → %d × %s", count, count, req.DeviceClassName)})
	}
	for _, s := range selectors {
		req.Selectors = append(req.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: s}})
	}
	return ask, findings, nil
}

// HAMiAsk is what one container of a HAMi pod asks gpudra for.
type HAMiAsk struct {
	Request resourceapi.ExactDeviceRequest
	// Distinct: the request's devices must lie on different GPUs (several shares: HAMi
	// puts each vGPU of a container on a card of its own).
	Distinct bool
	// Priority is the shares' priority (nvidia.com/priority), for a GpuConfig; "" for none.
	Priority api.SharePriority
}

// priorityConfig is the GpuConfig that gives a share its priority, as JSON.
func priorityConfig(p api.SharePriority) []byte {
	raw, _ := json.Marshal(map[string]any{"apiVersion": api.APIVersion, "kind": api.GpuConfigKind, "limits": map[string]any{"priority": string(p)}})
	return raw
}

// minShareMemory is the least memory a share consumes.
const minShareMemory = 256 << 20

// capMemory writes a MiB count as a quantity.
func capMemory(mib int64) string {
	return resource.NewQuantity(mib<<20, resource.BinarySI).String()
}

// wholeNumber reads a quantity as Kubernetes writes one ("30", "30000m") that must be a
// whole number from lo to hi.
func wholeNumber(val string, lo, hi int64) (int64, bool) {
	q, err := resource.ParseQuantity(strings.TrimSpace(val))
	if err != nil {
		return 0, false
	}
	if q.Cmp(*resource.NewQuantity(lo, resource.DecimalSI)) < 0 || q.Cmp(*resource.NewQuantity(hi, resource.DecimalSI)) > 0 {
		return 0, false
	}
	if m := q.MilliValue(); m%1000 == 0 && q.Cmp(*resource.NewMilliQuantity(m, resource.DecimalSI)) == 0 {
		return m / 1000, true
	}
	return 0, false
}

// HAMiSelectors converts a pod's HAMi annotations into CEL selectors on gpudra's device
// attributes. A card type matches as HAMi matches it: case-insensitively, anywhere in the
// product name ("A100" matches "NVIDIA A100-SXM4-80GB", and also "NVIDIA A1000"). findings
// name every HAMi annotation of the pod (the scheduler policies are not carried over); errs
// those whose value cannot be read.
func HAMiSelectors(annotations map[string]string) (selectors []string, findings, errs []Finding) {
	attr := func(name string) string { return fmt.Sprintf("device.attributes[%q].%s", api.DriverName, name) }
	var keys []string
	for k := range annotations {
		if hamiAnnotation(k) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b string) int {
		ia, ib := slices.Index(hamiAnnotations, a), slices.Index(hamiAnnotations, b)
		if ia < 0 {
			ia = len(hamiAnnotations)
		}
		if ib < 0 {
			ib = len(hamiAnnotations)
		}
		if ia != ib {
			return ia - ib
		}
		return strings.Compare(a, b)
	})
	for _, k := range keys {
		v := annotations[k]
		switch k {
		case HAMiUseType, HAMiNoUseType:
			types, ok := list(v, isTypeChar)
			if !ok {
				errs = append(errs, Finding{k, NotConverted, fmt.Sprintf("%q: want a comma-separated list of card types (letters, digits, spaces, '.', '_', '+', '-'), e.g. \"A100,V100\"", v)})
				continue
			}
			var terms []string
			for _, t := range types {
				terms = append(terms, fmt.Sprintf("%s.upperAscii().contains(%s)", attr(api.AttrProductName), strconv.Quote(strings.ToUpper(t))))
			}
			expr := strings.Join(terms, " || ")
			what := "only GPUs whose productName contains one of them, ignoring case"
			if k == HAMiNoUseType {
				expr, what = "!("+expr+")", "no GPU whose productName contains one of them, ignoring case"
			}
			selectors = append(selectors, expr)
			findings = append(findings, Finding{k, Converted, fmt.Sprintf("%s → selector %s (%s)", v, expr, what)})
		case HAMiUseUUID, HAMiNoUseUUID:
			uuids, ok := list(v, isUUIDChar)
			if !ok {
				errs = append(errs, Finding{k, NotConverted, fmt.Sprintf("%q: want a comma-separated list of GPU UUIDs (letters, digits and '-'), e.g. \"GPU-0c2b4f5e-...\"", v)})
				continue
			}
			quoted := make([]string, len(uuids))
			for i, u := range uuids {
				quoted[i] = strconv.Quote(u)
			}
			expr := fmt.Sprintf("%s in [%s]", attr(api.AttrUUID), strings.Join(quoted, ", "))
			what := "only these GPUs"
			if k == HAMiNoUseUUID {
				expr, what = "!("+expr+")", "no GPU of these"
			}
			selectors = append(selectors, expr)
			findings = append(findings, Finding{k, Converted, fmt.Sprintf("→ selector %s (%s)", expr, what)})
		case HAMiGPUPolicy, HAMiNodePolicy:
			if v != "binpack" && v != "spread" {
				errs = append(errs, Finding{k, NotConverted, fmt.Sprintf("%q: want binpack or spread", v)})
				continue
			}
			scope := "GPUs within a node"
			if k == HAMiNodePolicy {
				scope = "nodes"
			}
			findings = append(findings, Finding{k, NotConverted, fmt.Sprintf("%s: not carried over; kube-scheduler and its DRA allocator choose among %s, and gpudra takes no per-pod %s policy", v, scope, v)})
		default:
			findings = append(findings, Finding{k, NotConverted, "an annotation of HAMi's that gpudra does not read; it stays as it was"})
		}
	}
	return selectors, findings, errs
}

// list splits a comma-separated annotation value; ok is false when it is empty, an item
// is empty, or an item has a character ok does not accept.
func list(v string, accept func(rune) bool) ([]string, bool) {
	var out []string
	for _, it := range strings.Split(v, ",") {
		it = strings.TrimSpace(it)
		if it == "" || strings.IndexFunc(it, func(r rune) bool { return !accept(r) }) >= 0 {
			return nil, false
		}
		out = append(out, it)
	}
	return out, len(out) > 0
}

func isUUIDChar(r rune) bool {
	return r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
}

func isTypeChar(r rune) bool {
	return isUUIDChar(r) || r == ' ' || r == '.' || r == '_' || r == '+'
}
