package convert

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
	resourceapi "k8s.io/api/resource/v1"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// isHAMiPod reports whether a pod spec is written for HAMi: a container asks for one of
// HAMi's resources, or the pod has one of HAMi's annotations.
func isHAMiPod(spec, meta *yaml.Node) bool {
	for _, k := range keys(get(meta, "annotations")) {
		if hamiAnnotation(k) {
			return true
		}
	}
	for _, list := range []string{"initContainers", "containers"} {
		for _, ctr := range items(get(spec, list)) {
			res := get(ctr, "resources")
			for _, field := range []string{"limits", "requests"} {
				for _, r := range keys(get(res, field)) {
					if slices.Contains(hamiResources, r) {
						return true
					}
				}
			}
		}
	}
	return false
}

// hamiContainer is one container of a HAMi pod that asks for GPUs.
type hamiContainer struct {
	ctr  *yaml.Node
	at   path // its resources
	h    HAMiContainer
	path map[string]path // where each resource is written
}

// convertHAMiPodSpec converts a HAMi pod spec into a claim from a new
// ResourceClaimTemplate, all of it or nothing: a value out of range, a resource HAMi does
// not serve or an annotation that cannot be read leaves the pod spec as it was.
func (c *converter) convertHAMiPodSpec(o *object, spec *yaml.Node, p path, meta *yaml.Node, mp path) {
	ann := map[string]string{}
	annNodes := get(meta, "annotations")
	for _, k := range keys(annNodes) {
		if hamiAnnotation(k) {
			v, _ := quantityText(get(annNodes, k))
			ann[k] = v
		}
	}
	annPath := func(k string) path { return mp.child("annotations").child(k) }
	selectors, annFindings, annErrs := HAMiSelectors(ann)

	var refused []pathMsg
	for _, e := range annErrs {
		refused = append(refused, pathMsg{annPath(e.Field), e.Message})
	}
	var ctrs []hamiContainer
	for _, list := range []string{"initContainers", "containers"} {
		for ci, ctr := range items(get(spec, list)) {
			hc := hamiContainer{ctr: ctr, at: p.child(list).index(ci).child("resources"), path: map[string]path{}}
			res := get(ctr, "resources")
			limits, requests := index(get(res, "limits")), index(get(res, "requests"))
			for _, field := range []string{"limits", "requests"} {
				for _, r := range keys(get(res, field)) {
					if !nvidiaKey(r) {
						continue
					}
					if _, seen := hc.path[r]; seen {
						continue
					}
					rp := hc.at.child(field).child(r)
					hc.path[r] = rp
					lv, lok := quantityText(limits[r])
					rv, rok := quantityText(requests[r])
					val := lv
					if !lok {
						val = rv
					}
					switch {
					case lok && rok && lv != rv:
						refused = append(refused, pathMsg{rp, fmt.Sprintf("limits (%s) and requests (%s) differ; a HAMi resource must have equal ones", lv, rv)})
					case r == dpGPU:
						hc.h.GPU = val
					case r == HAMiMemory:
						hc.h.Memory = val
					case r == HAMiMemoryPercent:
						hc.h.MemoryPercent = val
					case r == HAMiCores:
						hc.h.Cores = val
					case r == HAMiPriority:
						hc.h.Priority = val
					default:
						refused = append(refused, pathMsg{rp, fmt.Sprintf("%s: not a resource gpudra carries over from a HAMi pod (it carries %s, %s); a HAMi pod is converted as a whole", r, dpGPU, strings.Join(hamiResources, ", "))})
					}
				}
			}
			if hc.h.asks() {
				ctrs = append(ctrs, hc)
			}
		}
	}

	var wants []want
	var done []pathMsg // findings of converted resources, reported once the pod converts
	var notes []pathMsg
	total := int64(0)
	for _, hc := range ctrs {
		ask, findings, errs := HAMiRequest(hc.h, selectors)
		req := ask.Request
		// at is where a finding is reported: its resource's field, else the container's
		// resources with the resource's name in the message.
		at := func(f Finding) pathMsg {
			if rp, ok := hc.path[f.Field]; ok {
				return pathMsg{rp, f.Message}
			}
			return pathMsg{hc.at, f.Field + ": " + f.Message}
		}
		for _, e := range errs {
			refused = append(refused, at(e))
		}
		if len(errs) > 0 {
			continue
		}
		for _, f := range findings {
			pm := at(f)
			if f.Level == NotConverted {
				notes = append(notes, pm)
			} else {
				done = append(done, pm)
			}
		}
		total += req.Count
		var present []string
		for _, r := range append([]string{dpGPU}, hamiResources...) {
			if _, ok := hc.path[r]; ok {
				present = append(present, r)
			}
		}
		suffix := "gpu"
		if req.DeviceClassName == api.DeviceClassShare {
			suffix = "share"
		}
		wants = append(wants, want{ctr: hc.ctr, ctrName: text(hc.ctr, "name"), resource: present[0], also: present[1:],
			count: req.Count, at: hc.at, exact: exactNode(req), suffix: suffix, what: describe(req), distinct: ask.Distinct, priority: ask.Priority})
	}
	if total > maxDevices {
		refused = append(refused, pathMsg{p, fmt.Sprintf("the pod asks for %d GPUs in all; a ResourceClaim holds at most %d", total, maxDevices)})
	}
	switch {
	case len(refused) > 0:
		for _, r := range refused {
			c.report(NotConverted, o, r.p, "%s", r.msg)
		}
		for _, hc := range ctrs {
			c.report(NotConverted, o, hc.at, "left as it was: a HAMi pod is converted as a whole, and %s is not converted (reported above)", refused[0].p)
		}
		for _, f := range annFindings {
			c.report(NotConverted, o, annPath(f.Field), "left as it was: the pod spec is not converted")
		}
		return
	case len(wants) == 0:
		for _, f := range annFindings {
			c.report(NotConverted, o, annPath(f.Field), "no container asks for a GPU, so there is nothing to select; it stays as it was")
		}
		return
	}
	c.claimsFor(o, spec, p, wants, "HAMi")
	for _, d := range done {
		c.report(Converted, o, d.p, "%s", d.msg)
	}
	for _, n := range notes {
		c.report(NotConverted, o, n.p, "%s", n.msg)
	}
	for _, f := range annFindings {
		c.report(f.Level, o, annPath(f.Field), "%s", f.Message)
	}
}

// exactNode writes a request as YAML: its class, count, selectors and capacity.
func exactNode(r resourceapi.ExactDeviceRequest) *yaml.Node {
	exact := mapping("deviceClassName", r.DeviceClassName)
	if r.Count > 1 {
		set(exact, "count", integer(r.Count))
	}
	if len(r.Selectors) > 0 {
		var sels []*yaml.Node
		for _, s := range r.Selectors {
			sels = append(sels, mapping("cel", mapping("expression", s.CEL.Expression)))
		}
		set(exact, "selectors", sequence(sels...))
	}
	if r.Capacity != nil {
		reqs := mapping()
		for _, name := range []resourceapi.QualifiedName{api.CapMemory, api.CapCompute} {
			if q, ok := r.Capacity.Requests[name]; ok {
				set(reqs, string(name), str(q.String()))
			}
		}
		set(exact, "capacity", mapping("requests", reqs))
	}
	return exact
}

// describe says what a request asks for, for the report.
func describe(r resourceapi.ExactDeviceRequest) string {
	s := fmt.Sprintf("%d × %s", r.Count, r.DeviceClassName)
	if r.Capacity != nil {
		var caps []string
		for _, name := range []resourceapi.QualifiedName{api.CapMemory, api.CapCompute} {
			if q, ok := r.Capacity.Requests[name]; ok {
				caps = append(caps, string(name)+" "+q.String())
			}
		}
		s += " with " + strings.Join(caps, ", ")
	}
	if n := len(r.Selectors); n > 0 {
		s += fmt.Sprintf(", %d selectors", n)
	}
	return s
}
