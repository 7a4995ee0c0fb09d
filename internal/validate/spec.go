package validate

import (
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/utils/lru"
)

// The API server's own checks of the resource.k8s.io/v1 objects users write, as far as
// the API types and libraries carry them: names, the shape of requests and their
// references, CEL selectors compiled with the allocator's compiler, and the list limits.

// objectMeta checks names as the API server does. A namespaced object may leave its
// namespace to kubectl's -n.
func objectMeta(meta *metav1.ObjectMeta, namespaced bool, path *field.Path) field.ErrorList {
	m := meta.DeepCopy()
	if namespaced && m.Namespace == "" {
		m.Namespace = metav1.NamespaceDefault
	}
	return apimachineryvalidation.ValidateObjectMeta(m, namespaced, apimachineryvalidation.NameIsDNSSubdomain, path)
}

func claimSpec(spec *resourceapi.ResourceClaimSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	d := &spec.Devices
	path = path.Child("devices")
	// Request names, and "request/subrequest" for first-available subrequests.
	requests := sets.New[string]()
	errs = append(errs, tooMany(path.Child("requests"), len(d.Requests), resourceapi.DeviceRequestsMaxSize)...)
	for i, r := range d.Requests {
		rp := path.Child("requests").Index(i)
		errs = append(errs, dnsLabel(rp.Child("name"), r.Name)...)
		if requests.Has(r.Name) {
			errs = append(errs, field.Duplicate(rp.Child("name"), r.Name))
		}
		requests.Insert(r.Name)
		switch {
		case r.Exactly != nil && len(r.FirstAvailable) > 0:
			errs = append(errs, field.Invalid(rp, "", "exactly and firstAvailable exclude each other: set one"))
		case r.Exactly != nil:
			e := r.Exactly
			ep := rp.Child("exactly")
			errs = append(errs, deviceClassName(ep.Child("deviceClassName"), e.DeviceClassName)...)
			errs = append(errs, selectors(ep.Child("selectors"), e.Selectors)...)
			errs = append(errs, allocationMode(ep, e.AllocationMode, e.Count)...)
		case len(r.FirstAvailable) > 0:
			fp := rp.Child("firstAvailable")
			errs = append(errs, tooMany(fp, len(r.FirstAvailable), resourceapi.FirstAvailableDeviceRequestMaxSize)...)
			subs := sets.New[string]()
			for j, sub := range r.FirstAvailable {
				sp := fp.Index(j)
				errs = append(errs, dnsLabel(sp.Child("name"), sub.Name)...)
				if subs.Has(sub.Name) {
					errs = append(errs, field.Duplicate(sp.Child("name"), sub.Name))
				}
				subs.Insert(sub.Name)
				requests.Insert(r.Name + "/" + sub.Name)
				errs = append(errs, deviceClassName(sp.Child("deviceClassName"), sub.DeviceClassName)...)
				errs = append(errs, selectors(sp.Child("selectors"), sub.Selectors)...)
				errs = append(errs, allocationMode(sp, sub.AllocationMode, sub.Count)...)
			}
		default:
			errs = append(errs, field.Required(rp, "exactly or firstAvailable: what the request asks for"))
		}
	}
	known := func(p *field.Path, names []string) field.ErrorList {
		var errs field.ErrorList
		for k, n := range names {
			if !requests.Has(n) {
				errs = append(errs, field.Invalid(p.Index(k), n, fmt.Sprintf("names no request of the claim (its requests: %s)", strings.Join(sets.List(requests), ", "))))
			}
		}
		return errs
	}
	errs = append(errs, tooMany(path.Child("constraints"), len(d.Constraints), resourceapi.DeviceConstraintsMaxSize)...)
	for i, c := range d.Constraints {
		cp := path.Child("constraints").Index(i)
		errs = append(errs, known(cp.Child("requests"), c.Requests)...)
		if c.MatchAttribute != nil {
			errs = append(errs, qualifiedName(cp.Child("matchAttribute"), string(*c.MatchAttribute))...)
		}
	}
	errs = append(errs, tooMany(path.Child("config"), len(d.Config), resourceapi.DeviceConfigMaxSize)...)
	for i, c := range d.Config {
		cp := path.Child("config").Index(i)
		errs = append(errs, known(cp.Child("requests"), c.Requests)...)
		errs = append(errs, opaque(cp.Child("opaque"), c.Opaque)...)
	}
	return errs
}

func classSpec(spec *resourceapi.DeviceClassSpec, path *field.Path) field.ErrorList {
	errs := selectors(path.Child("selectors"), spec.Selectors)
	errs = append(errs, tooMany(path.Child("config"), len(spec.Config), resourceapi.DeviceConfigMaxSize)...)
	for i, c := range spec.Config {
		errs = append(errs, opaque(path.Child("config").Index(i).Child("opaque"), c.Opaque)...)
	}
	if n := spec.ExtendedResourceName; n != nil {
		for _, msg := range validation.IsQualifiedName(*n) {
			errs = append(errs, field.Invalid(path.Child("extendedResourceName"), *n, msg))
		}
	}
	return errs
}

func opaque(path *field.Path, o *resourceapi.OpaqueDeviceConfiguration) field.ErrorList {
	if o == nil {
		return field.ErrorList{field.Required(path, "the only kind of device configuration")}
	}
	var errs field.ErrorList
	switch {
	case o.Driver == "":
		errs = append(errs, field.Required(path.Child("driver"), "the driver the parameters are for, e.g. gpu.gpudra.dev"))
	case len(o.Driver) > resourceapi.DriverNameMaxLength:
		errs = append(errs, field.TooLong(path.Child("driver"), o.Driver, resourceapi.DriverNameMaxLength))
	default:
		for _, msg := range validation.IsDNS1123Subdomain(o.Driver) {
			errs = append(errs, field.Invalid(path.Child("driver"), o.Driver, msg))
		}
	}
	switch n := len(o.Parameters.Raw); {
	case n == 0:
		errs = append(errs, field.Required(path.Child("parameters"), "the driver's configuration object"))
	case n > resourceapi.OpaqueParametersMaxLength:
		errs = append(errs, field.TooLong(path.Child("parameters"), "", resourceapi.OpaqueParametersMaxLength))
	}
	return errs
}

// celResults keeps what compiling a selector expression found, so that a file that repeats
// one expression costs one compilation (dracel's own cache neither estimates costs nor
// keeps failures).
var celResults = lru.New(1000)

// celResult is what compiling one expression found: its error, else its worst-case cost.
type celResult struct {
	err  string
	cost uint64
}

func compileSelector(expr string) celResult {
	if r, ok := celResults.Get(expr); ok {
		return r.(celResult)
	}
	c := dracel.GetCompiler(dracel.Features{EnableConsumableCapacity: true, EnableListTypeAttributes: true}).
		CompileCELExpression(expr, dracel.Options{})
	r := celResult{cost: c.MaxCost}
	if c.Error != nil {
		r.err = c.Error.Detail
	}
	celResults.Add(expr, r)
	return r
}

func selectors(path *field.Path, list []resourceapi.DeviceSelector) field.ErrorList {
	errs := tooMany(path, len(list), resourceapi.DeviceSelectorsMaxSize)
	for i, s := range list {
		sp := path.Index(i).Child("cel")
		if s.CEL == nil {
			errs = append(errs, field.Required(sp, "a CEL selector"))
			continue
		}
		ep := sp.Child("expression")
		expr := s.CEL.Expression
		switch {
		case strings.TrimSpace(expr) == "":
			errs = append(errs, field.Required(ep, "a CEL expression that is true for the devices to select"))
		case len(expr) > resourceapi.CELSelectorExpressionMaxLength:
			errs = append(errs, field.TooLong(ep, "", resourceapi.CELSelectorExpressionMaxLength))
		default:
			switch c := compileSelector(expr); {
			case c.err != "":
				errs = append(errs, field.Invalid(ep, expr, c.err))
			case c.cost > resourceapi.CELSelectorExpressionMaxCost:
				errs = append(errs, field.Forbidden(ep, fmt.Sprintf("too expensive: its worst-case cost %d is over the limit %d", c.cost, resourceapi.CELSelectorExpressionMaxCost)))
			}
		}
	}
	return errs
}

func allocationMode(path *field.Path, mode resourceapi.DeviceAllocationMode, count int64) field.ErrorList {
	modes := []string{string(resourceapi.DeviceAllocationModeExactCount), string(resourceapi.DeviceAllocationModeAll)}
	switch mode {
	case "", resourceapi.DeviceAllocationModeExactCount:
		if count < 0 {
			return field.ErrorList{field.Invalid(path.Child("count"), count, "must be at least 1 (0 or unset: 1)")}
		}
	case resourceapi.DeviceAllocationModeAll:
		if count != 0 {
			return field.ErrorList{field.Invalid(path.Child("count"), count, "must be unset with allocationMode All")}
		}
	default:
		return field.ErrorList{field.NotSupported(path.Child("allocationMode"), mode, modes)}
	}
	return nil
}

func deviceClassName(path *field.Path, name string) field.ErrorList {
	return requiredName(path, name, "the DeviceClass the devices come from", validation.IsDNS1123Subdomain)
}

func dnsLabel(path *field.Path, name string) field.ErrorList {
	return requiredName(path, name, "a DNS label", validation.IsDNS1123Label)
}

// requiredName is a name that must be set (what says what it names) and pass check.
func requiredName(path *field.Path, name, what string, check func(string) []string) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(path, what)}
	}
	var errs field.ErrorList
	for _, msg := range check(name) {
		errs = append(errs, field.Invalid(path, name, msg))
	}
	return errs
}

func qualifiedName(path *field.Path, name string) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsQualifiedName(name) {
		errs = append(errs, field.Invalid(path, name, msg))
	}
	return errs
}

func tooMany(path *field.Path, n, limit int) field.ErrorList {
	if n > limit {
		return field.ErrorList{field.TooMany(path, n, limit)}
	}
	return nil
}
