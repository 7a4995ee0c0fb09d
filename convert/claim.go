package convert

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/api/resource"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/driver"
)

// plan collects a claim's rewrites and the reasons it cannot be converted; the rewrites
// are applied only when there are no such reasons.
type plan struct {
	edits   []func()
	done    []pathMsg
	blocked []pathMsg
	// aside are reported whether or not the claim converts (parts of other drivers).
	aside []pathMsg
}

type pathMsg struct {
	p   path
	msg string
}

func (pl *plan) edit(p path, f func(), format string, args ...any) {
	pl.edits = append(pl.edits, f)
	pl.done = append(pl.done, pathMsg{p, fmt.Sprintf(format, args...)})
}

func (pl *plan) block(p path, format string, args ...any) {
	pl.blocked = append(pl.blocked, pathMsg{p, fmt.Sprintf(format, args...)})
}

// finish applies the plan or reports why not.
func (c *converter) finish(o *object, pl *plan, what string) bool {
	for _, a := range pl.aside {
		c.report(NotConverted, o, a.p, "%s", a.msg)
	}
	if len(pl.blocked) > 0 {
		for _, b := range pl.blocked {
			c.report(NotConverted, o, b.p, "%s; the %s is left as it was", b.msg, what)
		}
		return false
	}
	for _, e := range pl.edits {
		e()
	}
	for _, d := range pl.done {
		c.report(Converted, o, d.p, "%s", d.msg)
	}
	return true
}

// requestKind is what one request (or subrequest) of a claim asks for.
type requestKind struct {
	nvidia bool // a request for NVIDIA's GPU driver that converts
	kind   kind // the gpudra kind it asks for (also for requests already written for gpudra)
}

// convertDeviceClaim converts a claim's spec.devices, all NVIDIA GPU parts or none.
// flat is resource.k8s.io/v1beta1's shape, whose requests carry deviceClassName
// themselves instead of in exactly.
func (c *converter) convertDeviceClaim(o *object, devices *yaml.Node, p path, flat bool) {
	if !isMap(devices) {
		return
	}
	pl := &plan{}
	// kinds holds what each request asks for, by name; a request with subrequests by
	// "request/subrequest", each of its subrequests listed in subs.
	kinds := map[string]requestKind{}
	subs := map[string][]string{}
	var all []string
	for i, req := range items(get(devices, "requests")) {
		rp := p.child("requests").index(i)
		name := text(req, "name")
		all = append(all, name)
		exact, ep := get(req, "exactly"), rp.child("exactly")
		if exact == nil && flat && get(req, "deviceClassName") != nil {
			exact, ep = req, rp
		}
		if exact != nil {
			kinds[name] = c.convertRequest(pl, exact, ep)
		}
		for j, sub := range items(get(req, "firstAvailable")) {
			key := name + "/" + text(sub, "name")
			kinds[key] = c.convertRequest(pl, sub, rp.child("firstAvailable").index(j))
			subs[name] = append(subs[name], key)
		}
	}
	for j, con := range items(get(devices, "constraints")) {
		scope := all
		if rs := items(get(con, "requests")); len(rs) > 0 {
			scope = nil
			for _, r := range rs {
				scope = append(scope, r.Value)
			}
		}
		var expanded []string
		for _, r := range scope {
			if s, ok := subs[r]; ok {
				expanded = append(expanded, s...)
			} else {
				expanded = append(expanded, r)
			}
		}
		c.convertConstraint(pl, con, p.child("constraints").index(j), kinds, expanded)
	}
	for j, cfg := range items(get(devices, "config")) {
		c.convertClaimConfig(pl, cfg, p.child("config").index(j))
	}
	c.finish(o, pl, "claim")
}

// convertRequest plans the conversion of one exactly request or subrequest.
func (c *converter) convertRequest(pl *plan, r *yaml.Node, p path) requestKind {
	classNode := get(r, "deviceClassName")
	class, _ := scalar(classNode)
	cp := p.child("deviceClassName")
	var k kind
	newClass := ""
	switch {
	case class == nvClassGPU:
		k, newClass = kindGPU, api.DeviceClassGPU
	case class == nvClassMIG:
		k, newClass = kindMIG, api.DeviceClassMIG
	case class == nvClassVFIO:
		pl.block(cp, "%s: VFIO passthrough of whole GPUs to VMs has no gpudra equivalent", class)
		return requestKind{}
	case nvComputeDomainClasses[class]:
		pl.aside = append(pl.aside, pathMsg{cp, class + ": an IMEX channel or daemon of NVIDIA's ComputeDomains, which gpudra does not offer; it stays for NVIDIA's compute-domain driver"})
		return requestKind{}
	case class == api.DeviceClassGPU || strings.HasPrefix(class, "nvlink-group") && strings.HasSuffix(class, ".gpudra.dev"):
		return requestKind{kind: kindGPU}
	case class == api.DeviceClassShare:
		return requestKind{kind: kindShare}
	case class == api.DeviceClassMIG || strings.HasPrefix(class, "mig-") && strings.HasSuffix(class, ".gpudra.dev"):
		return requestKind{kind: kindMIG}
	default:
		if ic, ok := c.classes[class]; ok {
			if ic.why != "" {
				pl.block(cp, "%s: the input's DeviceClass %s is not converted (%s)", class, class, ic.why)
				return requestKind{}
			}
			k, newClass = ic.kind, class
			break
		}
		if mentionsNVIDIA(r) {
			pl.block(cp, "%s: a DeviceClass that is not in the input, whose selectors here read NVIDIA's driver; pass the DeviceClass too so that it is converted with its claims", class)
		}
		return requestKind{}
	}

	// Consumable capacity: memory on a whole GPU of NVIDIA's is a share in gpudra.
	capReqs := getPath(r, "capacity", "requests")
	shared := len(keys(capReqs)) > 0
	if shared {
		if k != kindGPU || newClass != api.DeviceClassGPU {
			pl.block(p.child("capacity"), "capacity requests on a %s: gpudra shares capacity of whole GPUs only (DeviceClass %s)", k, api.DeviceClassShare)
			shared = false
		} else {
			k, newClass = kindShare, api.DeviceClassShare
		}
	}
	if newClass != class {
		what := ""
		if k == kindShare {
			what = " (it requests capacity: a share of a GPU)"
		}
		pl.edit(cp, func() { setScalar(classNode, newClass) }, "%s → %s%s", class, newClass, what)
	}
	if shared {
		c.convertCapacity(pl, capReqs, p.child("capacity").child("requests"))
	}
	for j, sel := range items(get(r, "selectors")) {
		c.convertExpression(pl, getPath(sel, "cel", "expression"), p.child("selectors").index(j).child("cel").child("expression"), k, false)
	}
	for j, d := range items(get(r, "derivedAttributes")) {
		c.convertExpression(pl, get(d, "expression"), p.child("derivedAttributes").index(j).child("expression"), k, true)
		if n := get(d, "name"); n != nil {
			if dom, name, ok := strings.Cut(n.Value, "/"); ok && dom == nvDriver {
				pl.block(p.child("derivedAttributes").index(j).child("name"), "%s: a derived attribute in NVIDIA's domain shadows one of its attributes (%s); rename it by hand", n.Value, name)
			}
		}
	}
	return requestKind{nvidia: true, kind: k}
}

// mentionsNVIDIA reports whether a request's selectors name NVIDIA's driver.
func mentionsNVIDIA(r *yaml.Node) bool {
	for _, sel := range items(get(r, "selectors")) {
		if strings.Contains(text(get(sel, "cel"), "expression"), nvDriver) {
			return true
		}
	}
	return false
}

func (c *converter) convertExpression(pl *plan, n *yaml.Node, p path, k kind, derived bool) {
	expr, ok := scalar(n)
	if !ok {
		return
	}
	res := convertCEL(expr, k, derived)
	for _, w := range res.whys {
		pl.block(p, "%s", w)
	}
	if len(res.whys) > 0 || !res.changed {
		return
	}
	msg := "reads gpudra's attributes (domain " + api.DriverName
	if len(res.changes) > 0 {
		msg += "; " + strings.Join(slices.Compact(slices.Sorted(slices.Values(res.changes))), ", ")
	}
	msg += "): " + oneLine(res.expr)
	out := res.expr
	pl.edit(p, func() { n.Value = out }, "%s", msg)
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// convertCapacity plans a share's capacity requests: memory, in gpudra's domain.
func (c *converter) convertCapacity(pl *plan, reqs *yaml.Node, p path) {
	for i := 0; i+1 < len(reqs.Content); i += 2 {
		keyNode, val := reqs.Content[i], reqs.Content[i+1]
		key := keyNode.Value
		name, domain := key, nvDriver
		if d, n, ok := strings.Cut(key, "/"); ok {
			domain, name = d, n
		}
		kp := p.child(key)
		if domain != nvDriver && domain != api.DriverName {
			pl.block(kp, "capacity of domain %s: gpudra's shares have memory and compute in domain %s", domain, api.DriverName)
			continue
		}
		t := nvCapacity(kindShare, name)
		if t.why != "" {
			pl.block(kp, "capacity %q: %s", name, t.why)
			continue
		}
		q, err := resource.ParseQuantity(val.Value)
		if err != nil || q.Sign() <= 0 {
			pl.block(kp, "%q: want a positive quantity of memory, e.g. 4Gi", val.Value)
			continue
		}
		note := "gpudra enforces it in the container (HAMi-core or MPS limits)"
		if q.Cmp(driver.ShareMemoryMin) < 0 {
			note = fmt.Sprintf("gpudra's shares start at %s, so it consumes %s; %s", driver.ShareMemoryMin.String(), driver.ShareMemoryMin.String(), note)
		}
		if key != api.CapMemory {
			pl.edit(kp, func() { setScalar(keyNode, api.CapMemory) }, "%s → %s: %s", key, api.CapMemory, note)
		} else {
			pl.edit(kp, func() {}, "%s of the GPU's memory, as a share: %s", val.Value, note)
		}
	}
}

// convertConstraint plans a matchAttribute or distinctAttribute constraint over the
// requests (and subrequests) of scope.
func (c *converter) convertConstraint(pl *plan, con *yaml.Node, p path, kinds map[string]requestKind, scope []string) {
	for _, field := range []string{"matchAttribute", "distinctAttribute"} {
		n := get(con, field)
		q, ok := scalar(n)
		if !ok {
			continue
		}
		fp := p.child(field)
		domain, name, ok := strings.Cut(q, "/")
		if !ok {
			continue
		}
		var nv, other []kind
		foreign := false
		for _, r := range scope {
			rk, known := kinds[r]
			switch {
			case !known || rk.kind == 0:
				foreign = true
			case rk.nvidia:
				nv = append(nv, rk.kind)
			default:
				other = append(other, rk.kind)
			}
		}
		switch domain {
		case nvDriver:
			if foreign || len(other) > 0 {
				pl.block(fp, "%s: applies to requests that are not for NVIDIA's GPU driver too", q)
				continue
			}
			var to string
			bad := false
			for _, k := range nv {
				t := nvAttribute(k, name)
				if t.staticMIG {
					t.why = staticMIGOnly + ", and a constraint on it keeps the claim off nodes with dynamic MIG; constrain the GPU by parentUUID instead"
				}
				if t.why != "" {
					pl.block(fp, "%s on a %s: %s", q, k, t.why)
					bad = true
					break
				}
				if !publishes(k, "attributes", t.domain, t.name) {
					pl.block(fp, "%s: gpudra's %ss do not publish %s/%s", q, k, t.domain, t.name)
					bad = true
					break
				}
				if to != "" && to != t.domain+"/"+t.name {
					pl.block(fp, "%s maps to different gpudra attributes for the requests it applies to", q)
					bad = true
					break
				}
				to = t.domain + "/" + t.name
			}
			if bad || to == "" {
				continue
			}
			pl.edit(fp, func() { setScalar(n, to) }, "%s → %s", q, to)
		case stdDomain, api.DriverName:
			for _, k := range nv {
				if !publishes(k, "attributes", domain, name) {
					pl.block(fp, "%s: gpudra's %ss do not publish it", q, k)
					break
				}
			}
		}
	}
}

// convertClaimConfig plans one entry of a claim's config.
func (c *converter) convertClaimConfig(pl *plan, cfg *yaml.Node, p path) {
	opaque := get(cfg, "opaque")
	driverNode := get(opaque, "driver")
	drv, _ := scalar(driverNode)
	op := p.child("opaque")
	switch drv {
	case nvDriver:
		c.planConfig(pl, opaque, op, driverNode)
	case nvComputeDomainDriver:
		pl.aside = append(pl.aside, pathMsg{op, "a config of NVIDIA's compute-domain driver, which gpudra does not replace; it stays"})
	}
}

// planConfig plans an opaque config of NVIDIA's GPU driver (claims and DeviceClasses).
func (c *converter) planConfig(pl *plan, opaque *yaml.Node, op path, driverNode *yaml.Node) {
	params := get(opaque, "parameters")
	res := convertConfig(params)
	pp := op.child("parameters")
	for _, w := range res.whys {
		fp := pp
		for _, part := range strings.Split(w.field, ".") {
			if part != "" {
				fp = fp.child(part)
			}
		}
		pl.block(fp, "%s", w.why)
	}
	if len(res.whys) > 0 {
		return
	}
	from := text(params, "kind")
	newParams := res.params
	pl.edit(op, func() {
		setScalar(driverNode, api.DriverName)
		set(opaque, "parameters", newParams)
	}, "NVIDIA's %s → gpudra's %s (driver %s, %s)", from, res.summary, api.DriverName, api.APIVersion)
}
