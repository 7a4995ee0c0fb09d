package convert

import (
	"strings"

	"go.yaml.in/yaml/v3"
)

// What a manifest says to NVIDIA's software outside the fields the converter rewrites:
// annotations and labels in NVIDIA's domains, and node selectors on the labels NVIDIA's
// GPU feature discovery sets. They are left as they are, and gpudra reads none of them,
// so each is reported.

// nvidiaKey reports whether a label, annotation or resource key is in one of NVIDIA's
// domains (nvidia.com and its subdomains).
func nvidiaKey(k string) bool {
	domain, _, ok := strings.Cut(k, "/")
	return ok && (domain == "nvidia.com" || strings.HasSuffix(domain, ".nvidia.com"))
}

// reportMetadata reports the annotations and labels of metadata m in NVIDIA's domains.
// A pod's HAMi annotations (pod is true for a pod's metadata) are reported where its spec
// is converted.
func (c *converter) reportMetadata(o *object, m *yaml.Node, p path, pod bool) {
	for _, f := range [...]struct{ field, what string }{{"annotations", "an annotation"}, {"labels", "a label"}} {
		field, what := f.field, f.what
		for _, k := range keys(get(m, field)) {
			if pod && field == "annotations" && hamiAnnotation(k) {
				continue
			}
			if nvidiaKey(k) {
				c.report(NotConverted, o, p.child(field).child(k), "%s for NVIDIA's software, which gpudra does not read; it stays as it was and means nothing to gpudra", what)
			}
		}
	}
}

// reportNodeSelection reports a pod spec's node selectors on labels in NVIDIA's domains
// (those of NVIDIA's GPU feature discovery, such as nvidia.com/gpu.product).
func (c *converter) reportNodeSelection(o *object, spec *yaml.Node, p path) {
	why := "a node label of NVIDIA's GPU feature discovery, which gpudra does not set; it stays, and selects only nodes where GPU feature discovery runs (a claim's selectors on gpu.gpudra.dev attributes select GPUs by product instead)"
	for _, k := range keys(get(spec, "nodeSelector")) {
		if nvidiaKey(k) {
			c.report(NotConverted, o, p.child("nodeSelector").child(k), "%s", why)
		}
	}
	na := getPath(spec, "affinity", "nodeAffinity")
	ap := p.child("affinity").child("nodeAffinity")
	report := func(terms []*yaml.Node, tp path) {
		for i, term := range terms {
			for j, e := range items(get(term, "matchExpressions")) {
				if nvidiaKey(text(e, "key")) {
					c.report(NotConverted, o, tp.index(i).child("matchExpressions").index(j).child("key"), "%s: %s", text(e, "key"), why)
				}
			}
		}
	}
	req := "requiredDuringSchedulingIgnoredDuringExecution"
	report(items(getPath(na, req, "nodeSelectorTerms")), ap.child(req).child("nodeSelectorTerms"))
	pref := "preferredDuringSchedulingIgnoredDuringExecution"
	for i, t := range items(get(na, pref)) {
		report([]*yaml.Node{get(t, "preference")}, ap.child(pref).index(i).child("preference"))
	}
}

// hasNvidiaResource reports whether a subtree names a resource in NVIDIA's domains in
// a resources mapping's limits or requests.
func hasNvidiaResource(n *yaml.Node, depth int) bool {
	if n == nil || depth > MaxDepth {
		return false
	}
	if n.Kind == yaml.MappingNode {
		for _, f := range []string{"limits", "requests"} {
			for _, k := range keys(get(n, f)) {
				if nvidiaKey(k) {
					return true
				}
			}
		}
	}
	for _, e := range n.Content {
		if hasNvidiaResource(e, depth+1) {
			return true
		}
	}
	return false
}

// nvidiaRuntimeEnv are the environment variables NVIDIA's container runtime reads to choose
// and set up GPUs. Under DRA the CDI devices of a container's claims do that.
var nvidiaRuntimeEnv = map[string]bool{
	"NVIDIA_VISIBLE_DEVICES": true, "NVIDIA_DRIVER_CAPABILITIES": true, "NVIDIA_REQUIRE_CUDA": true,
	"NVIDIA_MIG_CONFIG_DEVICES": true, "NVIDIA_MIG_MONITOR_DEVICES": true, "NVIDIA_DISABLE_REQUIRE": true,
}

// reportNvidiaRuntime reports what a pod spec says to NVIDIA's container runtime rather than
// to Kubernetes: its runtime class and the NVIDIA_* variables of its containers. They stay,
// and can give a container GPUs beside its claims' devices, so each is named.
func (c *converter) reportNvidiaRuntime(o *object, spec *yaml.Node, p path) {
	if rc := text(spec, "runtimeClassName"); strings.Contains(strings.ToLower(rc), "nvidia") {
		c.report(NotConverted, o, p.child("runtimeClassName"), "runtime class %s is NVIDIA's container runtime; it stays, and gpudra's CDI devices reach the container without it (a runtime that reads NVIDIA_VISIBLE_DEVICES can add GPUs the claims did not allocate)", rc)
	}
	for _, list := range []string{"initContainers", "containers"} {
		for ci, ctr := range items(get(spec, list)) {
			for ei, e := range items(get(ctr, "env")) {
				if name := text(e, "name"); nvidiaRuntimeEnv[name] {
					c.report(NotConverted, o, p.child(list).index(ci).child("env").index(ei), "%s is read by NVIDIA's container runtime, not by gpudra; it stays, and with that runtime it can give the container GPUs its claims did not allocate: remove it once the pod uses claims", name)
				}
			}
		}
	}
}
