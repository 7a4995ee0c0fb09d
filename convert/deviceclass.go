package convert

import (
	"fmt"
	"sort"
	"strings"
)

// convertDeviceClass converts a DeviceClass of the input that selects devices of NVIDIA's
// GPU driver (such as a class per MIG profile with an extendedResourceName). NVIDIA's own
// classes are reported, not converted: gpudra's chart installs its own.
func (c *converter) convertDeviceClass(o *object) {
	spec := get(o.node, "spec")
	if to, own := nvOwnClasses[o.name]; own {
		switch {
		case to != "":
			also := ""
			if ext := text(spec, "extendedResourceName"); ext != "" && c.ext[ext] != "" {
				also = fmt.Sprintf(" (its extendedResourceName %s is also %s's: of two classes naming one resource the newer one serves it)", ext, c.ext[ext])
			}
			c.report(NotConverted, o, "", "NVIDIA's own DeviceClass, installed by NVIDIA's chart; gpudra's chart installs %s in its place, so leave this one out when NVIDIA's driver goes%s", to, also)
		case nvComputeDomainClasses[o.name]:
			c.report(NotConverted, o, "", "NVIDIA's DeviceClass for ComputeDomains (IMEX), which gpudra does not offer")
		default:
			c.report(NotConverted, o, "", "NVIDIA's DeviceClass for VFIO passthrough, which gpudra does not offer")
		}
		return
	}

	nvidia := false
	types := map[string]bool{}
	for _, sel := range items(get(spec, "selectors")) {
		expr := text(get(sel, "cel"), "expression")
		info, err := inspectCEL(expr)
		if err != nil {
			nvidia = nvidia || strings.Contains(expr, nvDriver)
			continue
		}
		for _, r := range info.refs {
			nvidia = nvidia || r.domain == nvDriver
		}
		for _, l := range info.lits {
			nvidia = nvidia || l.value == nvDriver
		}
		for _, v := range info.typeValues {
			types[v] = true
		}
	}
	for _, cfg := range items(get(spec, "config")) {
		nvidia = nvidia || text(get(cfg, "opaque"), "driver") == nvDriver
	}
	if !nvidia {
		return
	}

	var k kind
	var tv []string
	for t := range types {
		tv = append(tv, t)
	}
	sort.Strings(tv)
	switch strings.Join(tv, ",") {
	case "gpu":
		k = kindGPU
	case "mig":
		k = kindMIG
	case "vfio":
		c.notClass(o, "spec.selectors", "selects VFIO passthrough devices, which gpudra does not offer")
		return
	case "":
		c.notClass(o, "spec.selectors", "selects devices of NVIDIA's driver without saying their type (type == \"gpu\" or \"mig\"), so which gpudra class it becomes cannot be told")
		return
	default:
		c.notClass(o, "spec.selectors", "selects NVIDIA devices of types "+strings.Join(tv, " and ")+"; gpudra's classes select one type each")
		return
	}

	pl := &plan{}
	for j, sel := range items(get(spec, "selectors")) {
		c.convertExpression(pl, getPath(sel, "cel", "expression"), path("spec.selectors").index(j).child("cel").child("expression"), k, false)
	}
	for j, cfg := range items(get(spec, "config")) {
		opaque := get(cfg, "opaque")
		op := path("spec.config").index(j).child("opaque")
		switch text(opaque, "driver") {
		case nvDriver:
			c.planConfig(pl, opaque, op, get(opaque, "driver"))
		case nvComputeDomainDriver:
			pl.aside = append(pl.aside, pathMsg{op, "a config of NVIDIA's compute-domain driver, which gpudra does not replace; it stays"})
		}
	}
	if !c.finish(o, pl, "DeviceClass") {
		c.classes[o.name] = inputClass{why: "its selectors or configs have no gpudra equivalent"}
		return
	}
	c.classes[o.name] = inputClass{kind: k}
	if ext := text(spec, "extendedResourceName"); ext != "" {
		msg := "pods asking for " + ext + " get this class's " + k.String() + "s"
		if other, ok := c.ext[ext]; ok {
			msg += "; gpudra's DeviceClass " + other + " names " + ext + " too, and of two classes naming one resource the newer one serves it"
		}
		c.report(Kept, o, "spec.extendedResourceName", "%s", msg)
	}
}

func (c *converter) notClass(o *object, p path, why string) {
	c.classes[o.name] = inputClass{why: why}
	c.report(NotConverted, o, p, "%s; the DeviceClass is left as it was", why)
}
