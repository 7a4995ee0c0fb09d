// Package convert rewrites manifests written for NVIDIA's DRA driver (DeviceClasses
// gpu.nvidia.com and mig.nvidia.com, CEL on device.attributes["gpu.nvidia.com"], opaque
// GpuConfig and MigDeviceConfig) and for NVIDIA's device plugin (nvidia.com/gpu and
// nvidia.com/mig-<profile> limits) into gpudra's, and reports what it changed, what it
// kept and what it could not convert. It never guesses: a claim whose NVIDIA GPU parts
// do not all have a gpudra equivalent is left exactly as it was.
package convert

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/deployments"
)

// Options control a conversion.
type Options struct {
	// Claims rewrites nvidia.com/gpu and nvidia.com/mig-<profile> container limits into a
	// ResourceClaimTemplate per pod template and the pod's resourceClaims. Without it the
	// limits are kept, for gpudra's DeviceClasses that carry those names as their
	// extendedResourceName to serve.
	Claims bool
	// Classes are gpudra's DeviceClasses, whose extendedResourceNames say which
	// device-plugin names gpudra serves; nil: the shipped ones (deployments.DeviceClasses).
	Classes []*resourceapi.DeviceClass
}

// Level says what happened to a field.
type Level string

// Levels of report entries.
const (
	// Converted: rewritten to gpudra's equivalent.
	Converted Level = "converted"
	// Kept: left as it is, and gpudra serves it as it is.
	Kept Level = "kept"
	// NotConverted: left as it is, with no gpudra equivalent (or none this converter can
	// be sure of).
	NotConverted Level = "not converted"
)

// Entry is one line of the report.
type Entry struct {
	Level Level
	// Object is "Kind namespace/name" (or "Kind name").
	Object string
	// Path is the field path in the object ("" for the whole object).
	Path    string
	Message string
}

func (e Entry) String() string {
	s := e.Object
	if e.Path != "" {
		s += " " + e.Path
	}
	return s + ": " + e.Message
}

// Result is a conversion's output and report.
type Result struct {
	// Output is the converted manifests, one YAML document per object.
	Output []byte
	// Entries is the report, in the order of the input.
	Entries []Entry
	// Objects counts the objects read.
	Objects int
}

// Count returns the number of entries of a level.
func (r *Result) Count(l Level) int {
	n := 0
	for _, e := range r.Entries {
		if e.Level == l {
			n++
		}
	}
	return n
}

// WriteReport writes the report: entries grouped by level, then a summary line.
func (r *Result) WriteReport(w io.Writer) error {
	var b strings.Builder
	for _, l := range []Level{Converted, Kept, NotConverted} {
		first := true
		for _, e := range r.Entries {
			if e.Level != l {
				continue
			}
			if first {
				fmt.Fprintf(&b, "%s:\n", l)
				first = false
			}
			fmt.Fprintf(&b, "  %s\n", e)
		}
	}
	fmt.Fprintf(&b, "%d objects: %d converted, %d kept, %d not converted\n",
		r.Objects, r.Count(Converted), r.Count(Kept), r.Count(NotConverted))
	_, err := io.WriteString(w, b.String())
	return err
}

// object is one manifest: a document, or an item of a List.
type object struct {
	node       *yaml.Node // the object's mapping
	doc        int        // index of its document
	prefix     path       // "items[3]" for a List's item
	apiVersion string
	kind       string
	namespace  string
	name       string
}

func (o *object) id() string {
	n := o.name
	if n == "" {
		n = "(unnamed)"
	}
	if o.namespace != "" {
		n = o.namespace + "/" + n
	}
	return o.kind + " " + n
}

func (o *object) group() (string, string) {
	g, v, ok := strings.Cut(o.apiVersion, "/")
	if !ok {
		return "", g
	}
	return g, v
}

type converter struct {
	opts    Options
	entries []Entry
	// ext maps the extendedResourceNames of gpudra's classes to the class.
	ext map[string]string
	// classes holds the DeviceClasses of the input that select NVIDIA's GPUs: the kind of
	// device each converts to, or why it does not convert.
	classes map[string]inputClass
	// cdTemplates maps namespace/name of the claim templates ComputeDomains make to the
	// ComputeDomain.
	cdTemplates map[string]string
	// names holds kind/namespace/name of every object in the input and written.
	names *namer
	// before holds documents to write before document i (claim templates for --claims).
	before map[int][]*yaml.Node
}

type inputClass struct {
	kind kind
	why  string
}

// Convert converts a stream of YAML documents.
func Convert(input []byte, opts Options) (*Result, error) {
	c := &converter{opts: opts, ext: map[string]string{}, classes: map[string]inputClass{},
		cdTemplates: map[string]string{}, names: newNamer(), before: map[int][]*yaml.Node{}}
	classes := opts.Classes
	if classes == nil {
		var err error
		if classes, err = deployments.DeviceClasses(); err != nil {
			return nil, fmt.Errorf("gpudra's DeviceClasses: %w", err)
		}
	}
	for _, dc := range classes {
		if dc.Spec.ExtendedResourceName != nil {
			c.ext[*dc.Spec.ExtendedResourceName] = dc.Name
		}
	}

	docs, expanded, err := decodeAll(input)
	if err != nil {
		return nil, err
	}
	var objs []*object
	for i, d := range docs {
		of := objectsOf(d, i)
		if expanded[i] {
			for _, o := range of {
				c.report(Converted, o, "", "YAML aliases and merge keys (<<) written out in full, as Kubernetes reads them, so that each field converts on its own")
			}
		}
		objs = append(objs, of...)
	}
	for _, o := range objs {
		c.names.take(o.kind + "/" + o.namespace + "/" + o.name)
		if g, _ := o.group(); g == nvConfigGroup && o.kind == "ComputeDomain" {
			if t := text(getPath(o.node, "spec", "channel", "resourceClaimTemplate"), "name"); t != "" {
				c.cdTemplates[o.namespace+"/"+t] = o.name
			}
		}
	}
	// DeviceClasses first: claims of the input's own classes convert with them.
	for _, o := range objs {
		if g, _ := o.group(); g == "resource.k8s.io" && o.kind == "DeviceClass" {
			c.convertObject(o)
		}
	}
	for _, o := range objs {
		if g, _ := o.group(); !(g == "resource.k8s.io" && o.kind == "DeviceClass") {
			c.convertObject(o)
		}
	}

	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	enc.CompactSeqIndent()
	for i, d := range docs {
		for _, extra := range c.before[i] {
			if err := enc.Encode(extra); err != nil {
				return nil, err
			}
		}
		if err := enc.Encode(d); err != nil {
			return nil, fmt.Errorf("writing document %d: %w", i+1, err)
		}
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return &Result{Output: out.Bytes(), Entries: c.entries, Objects: len(objs)}, nil
}

// objectsOf returns a document's object, or a List's items.
func objectsOf(doc *yaml.Node, i int) []*object {
	root := doc.Content[0]
	mk := func(n *yaml.Node, prefix path) *object {
		return &object{node: n, doc: i, prefix: prefix, apiVersion: text(n, "apiVersion"), kind: text(n, "kind"),
			namespace: text(get(n, "metadata"), "namespace"), name: text(get(n, "metadata"), "name")}
	}
	if text(root, "kind") == "List" || strings.HasSuffix(text(root, "kind"), "List") && get(root, "items") != nil {
		var out []*object
		for k, it := range items(get(root, "items")) {
			if isMap(it) {
				out = append(out, mk(it, path("items").index(k)))
			}
		}
		return out
	}
	return []*object{mk(root, "")}
}

func (c *converter) report(l Level, o *object, p path, format string, args ...any) {
	full := string(p)
	if o.prefix != "" && full != "" {
		full = string(o.prefix) + "." + full
	} else if o.prefix != "" {
		full = string(o.prefix)
	}
	c.entries = append(c.entries, Entry{Level: l, Object: o.id(), Path: full, Message: fmt.Sprintf(format, args...)})
}

var resourceVersions = map[string]bool{"v1": true, "v1beta2": true, "v1beta1": true}

func (c *converter) convertObject(o *object) {
	c.reportMetadata(o, get(o.node, "metadata"), "metadata", isPodSpec(get(o.node, "spec")))
	group, version := o.group()
	switch group {
	case "resource.k8s.io":
		if version == "v1alpha2" {
			c.report(NotConverted, o, "", "classic DRA (resource.k8s.io/v1alpha2, parameters objects) has no structured form to convert; write it as a resource.k8s.io/v1 claim")
			return
		}
		if !resourceVersions[version] {
			if o.kind == "ResourceClaim" || o.kind == "ResourceClaimTemplate" || o.kind == "DeviceClass" {
				c.report(NotConverted, o, "apiVersion", "%s: want resource.k8s.io/v1, v1beta2 or v1beta1", o.apiVersion)
			}
			return
		}
		flat := version == "v1beta1"
		switch o.kind {
		case "ResourceClaim":
			c.convertDeviceClaim(o, getPath(o.node, "spec", "devices"), "spec.devices", flat)
		case "ResourceClaimTemplate":
			c.convertDeviceClaim(o, getPath(o.node, "spec", "spec", "devices"), "spec.spec.devices", flat)
		case "DeviceClass":
			c.convertDeviceClass(o)
		}
	case nvConfigGroup:
		switch o.kind {
		case "ComputeDomain":
			c.report(NotConverted, o, "", "NVIDIA's ComputeDomain (IMEX channels across a multi-node NVLink domain) has no gpudra equivalent; it stays for NVIDIA's compute-domain driver")
		case "ComputeDomainClique":
			c.report(NotConverted, o, "", "written by NVIDIA's compute-domain driver for its ComputeDomains; no gpudra equivalent")
		default:
			c.report(NotConverted, o, "", "%s of %s has no gpudra equivalent", o.kind, o.apiVersion)
		}
	default:
		c.convertPodSpecs(o, o.node, "")
	}
}
