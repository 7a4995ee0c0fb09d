package validate

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"

	"github.com/gpudra/gpudra/queueing/network"
	"github.com/gpudra/gpudra/webhook"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// The kinds of resource.k8s.io/v1 that carry gpudra configs.
const (
	kindResourceClaim         = "ResourceClaim"
	kindResourceClaimTemplate = "ResourceClaimTemplate"
	kindDeviceClass           = "DeviceClass"
)

var resourceKinds = []string{kindResourceClaim, kindResourceClaimTemplate, kindDeviceClass}

// maxListDepth bounds Lists inside Lists.
const maxListDepth = 4

// checkObject checks one Kubernetes object given as JSON.
func checkObject(js []byte, opts Options) (Document, []Problem) {
	var problems []Problem
	kind, checked := checkObjectAt(js, nil, 0, opts, &problems)
	return Document{Kind: kind, Checked: checked}, problems
}

// checkObjectAt checks the object js at path (nil: the document), appending its problems.
// It returns the object's kind, and whether it is one gpudra checks.
func checkObjectAt(js []byte, path *field.Path, depth int, opts Options, problems *[]Problem) (kind string, checked bool) {
	add := func(errs field.ErrorList) { *problems = append(*problems, fromFieldErrors(errs)...) }
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(js, &head); err != nil {
		add(field.ErrorList{field.Invalid(path, "", "not a Kubernetes object: "+err.Error())})
		return "", true
	}
	switch {
	case head.APIVersion == "":
		add(field.ErrorList{field.Required(path.Child("apiVersion"), "a Kubernetes object names its apiVersion")})
		return head.Kind, true
	case head.Kind == "":
		add(field.ErrorList{field.Required(path.Child("kind"), "a Kubernetes object names its kind")})
		return head.Kind, true
	case head.APIVersion == api.APIVersion:
		// A config written on its own, as a claim's or class's opaque parameters carry it.
		*problems = append(*problems, fromError(api.ValidateOpaque(js, path))...)
		return head.Kind, true
	case head.APIVersion == "v1" && head.Kind == "List":
		if depth >= maxListDepth {
			add(field.ErrorList{field.Invalid(path.Child("items"), "", fmt.Sprintf("Lists nested more than %d deep", maxListDepth))})
			return head.Kind, true
		}
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(js, &list); err != nil {
			add(field.ErrorList{field.Invalid(path.Child("items"), "", "not a list of objects: "+err.Error())})
			return head.Kind, true
		}
		for i, item := range list.Items {
			if _, ok := checkObjectAt(item, path.Child("items").Index(i), depth+1, opts, problems); ok {
				checked = true
			}
		}
		return head.Kind, checked
	case head.APIVersion == "v1" && head.Kind == "ConfigMap":
		return head.Kind, checkConfigMap(js, path, opts, problems)
	}
	gv := resourceapi.SchemeGroupVersion
	switch {
	case !slices.Contains(resourceKinds, head.Kind):
		return head.Kind, false // not an object gpudra checks
	case head.APIVersion != gv.String():
		add(field.ErrorList{field.NotSupported(path.Child("apiVersion"), head.APIVersion, []string{gv.String()})})
		return head.Kind, true
	}
	var obj any
	switch head.Kind {
	case kindResourceClaim:
		obj = &resourceapi.ResourceClaim{}
	case kindResourceClaimTemplate:
		obj = &resourceapi.ResourceClaimTemplate{}
	case kindDeviceClass:
		obj = &resourceapi.DeviceClass{}
	}
	strict, err := sigsjson.UnmarshalStrict(js, obj, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		add(field.ErrorList{field.Invalid(path, "", fmt.Sprintf("decoding %s: %v", head.Kind, err))})
		return head.Kind, true
	}
	for _, e := range strict {
		add(field.ErrorList{strictError(path, head.Kind, e)})
	}
	var errs field.ErrorList
	switch o := obj.(type) {
	case *resourceapi.ResourceClaim:
		errs = append(errs, objectMeta(&o.ObjectMeta, true, path.Child("metadata"))...)
		errs = append(errs, claimSpec(&o.Spec, path.Child("spec"))...)
	case *resourceapi.ResourceClaimTemplate:
		errs = append(errs, objectMeta(&o.ObjectMeta, true, path.Child("metadata"))...)
		errs = append(errs, claimSpec(&o.Spec.Spec, path.Child("spec", "spec"))...)
	case *resourceapi.DeviceClass:
		errs = append(errs, objectMeta(&o.ObjectMeta, false, path.Child("metadata"))...)
		errs = append(errs, classSpec(&o.Spec, path.Child("spec"))...)
	}
	add(errs)
	// The gpudra configs, with the webhook's own checks: every config decoded strictly and
	// validated, the share tiers. A field already reported above is not reported again.
	werrs, err := webhook.Validate(head.Kind, js)
	if err != nil {
		werrs = field.ErrorList{field.Invalid(path, "", err.Error())}
	}
	seen := sets.New[string]()
	for _, e := range errs {
		seen.Insert(e.Field)
	}
	for _, e := range prefixed(werrs, path) {
		if !seen.Has(e.Field) {
			add(field.ErrorList{e})
		}
	}
	return head.Kind, true
}

// prefixed puts errs, whose paths start at an object, below path (a List's item).
func prefixed(errs field.ErrorList, path *field.Path) field.ErrorList {
	if path == nil {
		return errs
	}
	for _, e := range errs {
		e.Field = path.String() + "." + e.Field
	}
	return errs
}

// strictError turns `unknown field "spec.foo"` into an error at spec.foo.
func strictError(path *field.Path, kind string, err error) *field.Error {
	msg := err.Error()
	for _, prefix := range []string{"unknown field ", "duplicate field "} {
		if rest, ok := strings.CutPrefix(msg, prefix); ok {
			if name, uerr := strconv.Unquote(rest); uerr == nil && name != "" {
				p := field.NewPath(name)
				if path != nil {
					p = path.Child(name)
				}
				return field.Forbidden(p, strings.TrimSpace(prefix)+" in "+kind)
			}
		}
	}
	return field.Invalid(path, "", fmt.Sprintf("decoding %s: %v", kind, msg))
}

// The keys of the ConfigMaps that carry gpudra's files: the controller's topology file and
// the chart's MIG layouts (mounted as the plugin's --mig-layouts file).
const (
	configMapTopologyKey   = network.FileKey
	configMapMIGLayoutsKey = "mig-layouts.yaml"
)

// checkConfigMap checks the gpudra files a ConfigMap carries; it says whether there were
// any.
func checkConfigMap(js []byte, path *field.Path, opts Options, problems *[]Problem) bool {
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := json.Unmarshal(js, &cm); err != nil {
		*problems = append(*problems, Problem{Path: path.Child("data").String(), Message: err.Error()})
		return true
	}
	checked := false
	for _, key := range []string{configMapTopologyKey, configMapMIGLayoutsKey} {
		data, ok := cm.Data[key]
		if !ok {
			continue
		}
		checked = true
		var found []Problem
		if key == configMapTopologyKey {
			found = checkTopology([]byte(data))
		} else {
			found = checkMIGLayouts([]byte(data), opts.Node, opts.Layout)
		}
		at := path.Child("data").Key(key).String()
		for _, p := range found {
			if p.Path != "" {
				p.Message = p.Path + ": " + p.Message
			}
			p.Path = at
			*problems = append(*problems, p)
		}
	}
	return checked
}
