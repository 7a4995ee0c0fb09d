package convert

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// convertPodSpecs finds the pod specs in an object, at any depth (a Pod's spec, the pod
// templates of Deployments, Jobs, CronJobs, JobSets, ...), and converts each.
func (c *converter) convertPodSpecs(o *object, n *yaml.Node, p path) {
	switch n.Kind {
	case yaml.MappingNode:
		if isPodSpec(n) {
			c.convertPodSpec(o, n, p, nil, "")
			return
		}
		if get(n, "containers") != nil && hasNvidiaResource(get(n, "containers"), 0) {
			c.report(NotConverted, o, p.child("containers"), "not a list of containers each with a name, so its nvidia.com resources are not converted")
			return
		}
		// Resources outside any pod's containers (a custom resource's own resources field,
		// a fragment of a manifest): nothing here becomes a claim, so each is named.
		forNvidiaKeys(n, func(f, k string) {
			c.report(NotConverted, o, p.child(f), "%s is not in a pod's containers, so it is not converted", k)
		})
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			if p == "" && (k == "apiVersion" || k == "kind" || k == "metadata" || k == "status") {
				continue
			}
			if k == "metadata" && p != "" {
				c.reportMetadata(o, n.Content[i+1], p.child(k), isPodSpec(get(n, "spec")))
			}
			if k == "spec" && isPodSpec(n.Content[i+1]) {
				// A Pod's spec or a pod template's: its metadata holds the pod's annotations.
				mp := p.child("metadata")
				c.convertPodSpec(o, n.Content[i+1], p.child(k), get(n, "metadata"), mp)
				continue
			}
			c.convertPodSpecs(o, n.Content[i+1], p.child(k))
		}
	case yaml.SequenceNode:
		for i, it := range n.Content {
			c.convertPodSpecs(o, it, p.index(i))
		}
	}
}

// isPodSpec: a mapping with containers, a list of named containers.
func isPodSpec(n *yaml.Node) bool {
	cs := items(get(n, "containers"))
	if len(cs) == 0 {
		return false
	}
	for _, ctr := range cs {
		if !isMap(ctr) || get(ctr, "name") == nil {
			return false
		}
	}
	return true
}

// want is one device-plugin resource of a container that becomes a claim request.
type want struct {
	ctr      *yaml.Node
	ctrName  string
	resource string
	count    int64
	profile  string // MIG profile; "" for a whole GPU
	at       path
	// A HAMi container's request: exact is the request written whole, suffix ends its
	// name, what says what it asks for, also are its other resources to remove, and
	// distinct asks for its devices on different GPUs.
	exact    *yaml.Node
	suffix   string
	what     string
	also     []string
	distinct bool
	priority api.SharePriority
}

// convertPodSpec converts a pod spec; meta is the pod's metadata (nil where the spec
// has none beside it), at mp.
func (c *converter) convertPodSpec(o *object, spec *yaml.Node, p path, meta *yaml.Node, mp path) {
	c.reportNodeSelection(o, spec, p)
	c.reportNvidiaRuntime(o, spec, p)
	c.reportOutsideContainers(o, spec, p)
	for i, rc := range items(get(spec, "resourceClaims")) {
		if cd, ok := c.cdTemplates[o.namespace+"/"+text(rc, "resourceClaimTemplateName")]; ok {
			c.report(NotConverted, o, p.child("resourceClaims").index(i), "ResourceClaimTemplate %s is ComputeDomain %s's IMEX channel, which gpudra does not offer; it stays for NVIDIA's compute-domain driver", text(rc, "resourceClaimTemplateName"), cd)
		}
	}
	if isHAMiPod(spec, meta) {
		c.convertHAMiPodSpec(o, spec, p, meta, mp)
		return
	}
	var wants []want
	// refused holds the device-plugin resources that cannot be converted: with any of
	// them the pod spec is left exactly as it was.
	var refused []path
	total := int64(0)
	for _, list := range []string{"initContainers", "containers"} {
		for ci, ctr := range items(get(spec, list)) {
			res := get(ctr, "resources")
			limits, requests := index(get(res, "limits")), index(get(res, "requests"))
			seen := map[string]bool{}
			for _, field := range []string{"limits", "requests"} {
				for _, r := range keys(get(res, field)) {
					if !strings.HasPrefix(r, "nvidia.com/") || seen[r] {
						continue
					}
					seen[r] = true
					rp := p.child(list).index(ci).child("resources").child(field).child(r)
					lv, lok := quantityText(limits[r])
					rv, rok := quantityText(requests[r])
					if lok && rok && lv != rv {
						c.report(NotConverted, o, rp, "limits (%s) and requests (%s) differ; a device-plugin resource must have equal ones", lv, rv)
						refused = append(refused, rp)
						continue
					}
					val, vp := lv, p.child(list).index(ci).child("resources").child("limits").child(r)
					if !lok {
						val, vp = rv, p.child(list).index(ci).child("resources").child("requests").child(r)
					}
					w, why := parseWant(r, val)
					if why != "" {
						c.report(NotConverted, o, vp, "%s", why)
						refused = append(refused, vp)
						continue
					}
					total += w.count
					w.ctr, w.ctrName, w.at = ctr, text(ctr, "name"), rp
					if !c.opts.Claims {
						if cls, ok := c.ext[r]; ok {
							c.report(Kept, o, rp, "served by gpudra's DeviceClass %s (its extendedResourceName) on nodes where no device plugin offers %s; --claims writes a ResourceClaimTemplate instead", cls, r)
						} else {
							hint := ""
							if w.profile != "" {
								hint = " (add MIG profile " + w.profile + " to the chart's deviceClasses.migProfiles)"
							}
							c.report(NotConverted, o, rp, "no gpudra DeviceClass has extendedResourceName %s%s; --claims writes a ResourceClaimTemplate instead", r, hint)
						}
						continue
					}
					wants = append(wants, w)
				}
			}
		}
	}
	if len(wants) == 0 {
		return
	}
	if len(refused) > 0 {
		for _, w := range wants {
			c.report(NotConverted, o, w.at, "left as it was: the pod spec is converted as a whole, and %s is not converted (reported above)", refused[0])
		}
		return
	}
	if total > maxDevices {
		for _, w := range wants {
			c.report(NotConverted, o, w.at, "the pod asks for %d devices in all; a ResourceClaim holds at most %d (resource.k8s.io/v1 allocation results), so the pod spec is left as it was", total, maxDevices)
		}
		return
	}
	c.claimsFor(o, spec, p, wants, "NVIDIA's device plugin")
}

// reportOutsideContainers names the nvidia.com resources of a pod spec that are not in its
// containers' or init containers' resources limits and requests: in pod-level resources
// (spec.resources, which Kubernetes accepts for cpu, memory and hugepages only), ephemeral
// containers (which take no resources), or any other field of the spec or of a container.
// None of them becomes a claim.
func (c *converter) reportOutsideContainers(o *object, spec *yaml.Node, p path) {
	res, rp := get(spec, "resources"), p.child("resources")
	forNvidiaKeys(res, func(f, k string) {
		c.report(NotConverted, o, rp.child(f).child(k), "pod-level resources take cpu, memory and hugepages only, so %s is not converted; ask for it in a container's resources", k)
	})
	c.reportStray(o, res, rp, false)
	c.reportStray(o, spec, p, false, "containers", "initContainers", "resources")
	for _, list := range []string{"containers", "initContainers"} {
		v, lp := get(spec, list), p.child(list)
		if v == nil {
			continue
		}
		if v.Kind != yaml.SequenceNode {
			c.convertPodSpecs(o, v, lp)
			continue
		}
		for i, ctr := range v.Content {
			if !isMap(ctr) {
				c.convertPodSpecs(o, ctr, lp.index(i))
				continue
			}
			c.reportStray(o, ctr, lp.index(i), true, "resources")
			c.reportStray(o, get(ctr, "resources"), lp.index(i).child("resources"), false)
		}
	}
}

// forNvidiaKeys calls f for each resource in NVIDIA's domains that n's limits or requests
// name.
func forNvidiaKeys(n *yaml.Node, f func(field, key string)) {
	for _, field := range []string{"limits", "requests"} {
		for _, k := range keys(get(n, field)) {
			if nvidiaKey(k) {
				f(field, k)
			}
		}
	}
}

// reportStray names the nvidia.com resources under n that nothing converts: those of n's
// own limits and requests when own is set, and those under any field of n but skip, at any
// depth.
func (c *converter) reportStray(o *object, n *yaml.Node, p path, own bool, skip ...string) {
	if !isMap(n) {
		return
	}
	if own {
		forNvidiaKeys(n, func(f, k string) {
			c.report(NotConverted, o, p.child(f), "%s is not in a container's resources, so it is not converted", k)
		})
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i].Value; !slices.Contains(skip, k) {
			c.convertPodSpecs(o, n.Content[i+1], p.child(k))
		}
	}
}

// maxDevices is the most devices one ResourceClaim can be allocated.
const maxDevices = resourceapi.AllocationResultsMaxSize

// quantityText returns the value of a resource quantity as written; ok is false when the
// field is absent. A value that is not a scalar is returned as its kind, so that it fails
// to parse with a message that says what it was.
func quantityText(n *yaml.Node) (string, bool) {
	if n == nil {
		return "", false
	}
	if s, ok := scalar(n); ok {
		return s, true
	}
	switch n.Kind {
	case yaml.MappingNode:
		return "(a mapping)", true
	case yaml.SequenceNode:
		return "(a list)", true
	}
	return "(not a scalar)", true
}

// parseWant reads a device-plugin resource and its quantity.
func parseWant(r, val string) (want, string) {
	w := want{resource: r}
	switch {
	case r == dpGPU:
	case strings.HasPrefix(r, dpMIGPrefix):
		prof, ok := migProfileOf(r)
		if !ok {
			return w, r + ": not a MIG resource name whose profile can be told (want nvidia.com/mig-<n>g.<m>gb, optionally .me, .me.all, .gfx, -me or -gfx)"
		}
		w.profile = prof
	default:
		return w, r + ": a device-plugin resource this converter cannot map (renamed or shared resources of the device plugin's config, e.g. nvidia.com/gpu.shared, have no gpudra equivalent)"
	}
	n, ok := deviceCount(val)
	if !ok {
		return w, fmt.Sprintf("%q: want a whole number of devices from 1 to %d", val, maxDevices)
	}
	w.count = n
	return w, ""
}

// deviceCount reads a device-plugin quantity: a whole number from 1 to maxDevices,
// written any way Kubernetes writes a quantity ("2", "2000m", "2e0").
func deviceCount(val string) (int64, bool) {
	q, err := resource.ParseQuantity(strings.TrimSpace(val))
	if err != nil {
		return 0, false
	}
	if q.Sign() <= 0 || q.Cmp(*resource.NewQuantity(maxDevices, resource.DecimalSI)) > 0 {
		return 0, false
	}
	// At most maxDevices: its thousandths fit an int64.
	if m := q.MilliValue(); m%1000 == 0 && q.Cmp(*resource.NewMilliQuantity(m, resource.DecimalSI)) == 0 {
		return m / 1000, true
	}
	return 0, false
}

// claimsFor writes a ResourceClaimTemplate with one request per wanted resource, gives
// the pod a claim from it and each container its requests.
// source names what the pod asked before ("NVIDIA's device plugin", "HAMi").
func (c *converter) claimsFor(o *object, spec *yaml.Node, p path, wants []want, source string) {
	if o.name == "" {
		for _, w := range wants {
			c.report(NotConverted, o, w.at, "the object has no metadata.name to name a ResourceClaimTemplate after")
		}
		return
	}
	tmpl := c.names.unique("ResourceClaimTemplate/"+o.namespace+"/", dnsLabel(o.name+"-gpus", maxObjectName), maxObjectName)
	podClaims := newNamer()
	for _, rc := range items(get(spec, "resourceClaims")) {
		podClaims.take(text(rc, "name"))
	}
	claim := podClaims.unique("", "gpus", maxLabel)

	reqNames := newNamer()
	var requests, constraints, configs []*yaml.Node
	for _, w := range wants {
		removeResource(w.ctr, w.resource)
		for _, r := range w.also {
			removeResource(w.ctr, r)
		}
		suffix := "gpu"
		if w.profile != "" {
			suffix = "mig-" + w.profile
		}
		if w.suffix != "" {
			suffix = w.suffix
		}
		name := reqNames.unique("", dnsLabel(w.ctrName+"-"+suffix, maxLabel), maxLabel)
		exact, what := w.exact, w.what
		if exact == nil {
			exact = mapping()
			class := api.DeviceClassGPU
			if w.profile != "" {
				class = api.DeviceClassMIG
			}
			set(exact, "deviceClassName", str(class))
			if w.count > 1 {
				set(exact, "count", integer(w.count))
			}
			what = fmt.Sprintf("%d × %s", w.count, class)
			if w.profile != "" {
				expr := fmt.Sprintf(`device.attributes[%q].%s == %q`, api.DriverName, api.AttrMIGProfile, w.profile)
				set(exact, "selectors", sequence(mapping("cel", mapping("expression", expr))))
				what += " with migProfile " + w.profile
			}
		}
		requests = append(requests, mapping("name", name, "exactly", exact))
		if w.priority != "" {
			params := mapping("apiVersion", api.APIVersion, "kind", api.GpuConfigKind, "limits", mapping("priority", string(w.priority)))
			configs = append(configs, mapping("requests", sequence(str(name)), "opaque", mapping("driver", api.DriverName, "parameters", params)))
		}
		if w.distinct {
			constraints = append(constraints, mapping("requests", sequence(str(name)), "distinctAttribute", api.DriverName+"/"+api.AttrUUID))
		}
		res := get(w.ctr, "resources")
		claims := get(res, "claims")
		if claims == nil {
			claims = sequence()
			set(res, "claims", claims)
		}
		claims.Content = append(claims.Content, mapping("name", claim, "request", name))
		c.report(Converted, o, w.at, "%s → request %s (%s) of claim %s from ResourceClaimTemplate %s", strings.Join(append([]string{w.resource}, w.also...), ", "), name, what, claim, tmpl)
	}
	if len(requests) == 0 {
		return
	}
	meta := mapping("name", tmpl)
	if o.namespace != "" {
		set(meta, "namespace", str(o.namespace))
	}
	devices := mapping("requests", sequence(requests...))
	if len(constraints) > 0 {
		set(devices, "constraints", sequence(constraints...))
	}
	if len(configs) > 0 {
		set(devices, "config", sequence(configs...))
	}
	root := mapping(
		"apiVersion", "resource.k8s.io/v1",
		"kind", "ResourceClaimTemplate",
		"metadata", meta,
		"spec", mapping("spec", mapping("devices", devices)),
	)
	root.Content[0].HeadComment = fmt.Sprintf("The devices %s %s asked %s for, as gpudra claims.", o.kind, o.name, source)
	doc := &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}}
	c.before[o.doc] = append(c.before[o.doc], doc)

	rcs := get(spec, "resourceClaims")
	if rcs == nil {
		rcs = sequence()
		set(spec, "resourceClaims", rcs)
	}
	rcs.Content = append(rcs.Content, mapping("name", claim, "resourceClaimTemplateName", tmpl))
	c.report(Converted, o, p.child("resourceClaims"), "claim %s from the new ResourceClaimTemplate %s (written before this object)", claim, tmpl)
}

// removeResource drops a resource from a container's limits and requests, and the maps
// that become empty.
func removeResource(ctr *yaml.Node, r string) {
	res := get(ctr, "resources")
	for _, field := range []string{"limits", "requests"} {
		m := get(res, field)
		if m == nil {
			continue
		}
		del(m, r)
		if len(m.Content) == 0 {
			del(res, field)
		}
	}
}
