package validate

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/internal/yamldoc"
)

// MaxFileBytes is the largest input Check reads: far more than any hand-written file of
// objects, layouts or topology needs.
const MaxFileBytes = 4 << 20

// The kinds of document Check tells apart (Options.Kind forces one).
const (
	// KindAuto detects each document's kind from its content.
	KindAuto = "auto"
	// KindObject: a Kubernetes object (resource.k8s.io/v1 ResourceClaim,
	// ResourceClaimTemplate, DeviceClass; a gpu.gpudra.dev/v1alpha1 config; a List).
	KindObject = "object"
	// KindMIGLayouts: a MIG layout file (version, mig-configs).
	KindMIGLayouts = "mig-layouts"
	// KindTopology: a network topology file (blocks of racks of nodes).
	KindTopology = "topology"
	// KindLab: a lab file (lab.gpudra.dev/v1alpha1 Lab).
	KindLab = "lab"
)

// Kinds are the accepted values of Options.Kind.
var Kinds = []string{KindAuto, KindObject, KindMIGLayouts, KindTopology, KindLab}

// Options says how documents are checked.
type Options struct {
	// Kind forces every document's kind; empty or KindAuto detects it.
	Kind string
	// Node, when set, is the node MIG layouts are checked against.
	Node *Node
	// Layout, when set, is the one MIG layout a layout file must have and, with Node, the
	// only one checked against the node (the layout a node's label names).
	Layout string
	// ParseLab is the lab's own lab file parser (lab.ParseFile); without it a lab file
	// is a problem.
	ParseLab func([]byte) error
}

// Problem is one thing wrong in a file.
type Problem struct {
	// Doc is the 1-based number of the document among the file's non-empty ones; 0 for
	// the file as a whole.
	Doc int
	// Path is the field path (spec.devices.requests[0].name), empty when the problem is
	// the document's.
	Path    string
	Message string
}

// Format is the problem as one line: FILE:doc N: path: message.
func (p Problem) Format(file string) string {
	var b strings.Builder
	b.WriteString(file)
	if p.Doc > 0 {
		fmt.Fprintf(&b, ":doc %d", p.Doc)
	}
	if p.Path != "" {
		b.WriteString(": " + p.Path)
	}
	b.WriteString(": " + oneLine(p.Message))
	return b.String()
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// Document is what Check found in one document.
type Document struct {
	// Doc is the document's number (see Problem.Doc).
	Doc int
	// Kind is what it was checked as: a Kubernetes kind ("ResourceClaim"), or one of
	// KindMIGLayouts, KindTopology, KindLab.
	Kind string
	// Checked is false for a Kubernetes object that carries nothing of gpudra's (a
	// Namespace, a Job): it is listed but not checked.
	Checked bool
}

// Result is what Check found in a file.
type Result struct {
	Documents []Document
	Problems  []Problem
}

// Check reads every document of data (YAML, or JSON) and checks each as its kind. It
// never fails: what is wrong is in Result.Problems.
func Check(data []byte, opts Options) Result {
	var res Result
	if len(data) > MaxFileBytes {
		res.Problems = append(res.Problems, Problem{Message: fmt.Sprintf("%d bytes, over the %d-byte (%d MiB) limit", len(data), MaxFileBytes, MaxFileBytes>>20)})
		return res
	}
	kind := opts.Kind
	if kind == "" {
		kind = KindAuto
	}
	if !slices.Contains(Kinds, kind) {
		res.Problems = append(res.Problems, Problem{Message: fmt.Sprintf("kind %q is not one of %s", kind, strings.Join(Kinds, ", "))})
		return res
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	n := 0
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			res.Problems = append(res.Problems, Problem{Doc: n + 1, Message: "not valid YAML: " + err.Error()})
			break
		}
		if yamldoc.Empty(doc) {
			continue
		}
		n++
		d, problems := checkDocument(doc, kind, opts)
		d.Doc = n
		res.Documents = append(res.Documents, d)
		for _, p := range problems {
			p.Doc = n
			res.Problems = append(res.Problems, p)
		}
	}
	if n == 0 && len(res.Problems) == 0 {
		res.Problems = append(res.Problems, Problem{Message: "no documents: the file is empty or holds only comments"})
	}
	return res
}

// checkDocument detects one document's kind, unless forced, and checks it.
func checkDocument(doc []byte, kind string, opts Options) (Document, []Problem) {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return Document{Kind: kind}, []Problem{{Message: "not valid YAML: " + err.Error()}}
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil || top == nil {
		return Document{Kind: kind}, []Problem{{Message: "not an object (a mapping of fields): each document is one object or file"}}
	}
	if kind == KindAuto {
		var problem *Problem
		if kind, problem = detect(top); problem != nil {
			return Document{Kind: KindAuto}, []Problem{*problem}
		}
	}
	switch kind {
	case KindMIGLayouts:
		return Document{Kind: kind, Checked: true}, checkMIGLayouts(doc, opts.Node, opts.Layout)
	case KindTopology:
		return Document{Kind: kind, Checked: true}, checkTopology(doc)
	case KindLab:
		if opts.ParseLab == nil {
			return Document{Kind: kind}, []Problem{{Message: "lab files are not checked here"}}
		}
		return Document{Kind: kind, Checked: true}, fromError(opts.ParseLab(doc))
	}
	return checkObject(js, opts)
}

// detect tells a document's kind from its fields: apiVersion and kind for objects and
// lab files, mig-configs for MIG layouts, blocks for topology files.
func detect(top map[string]json.RawMessage) (string, *Problem) {
	_, hasAPIVersion := top["apiVersion"]
	_, hasKind := top["kind"]
	_, hasMIGConfigs := top["mig-configs"]
	_, hasBlocks := top["blocks"]
	switch {
	case hasAPIVersion || hasKind:
		var apiVersion string
		_ = json.Unmarshal(top["apiVersion"], &apiVersion)
		if strings.HasPrefix(apiVersion, labGroup+"/") {
			return KindLab, nil
		}
		return KindObject, nil
	case hasMIGConfigs:
		return KindMIGLayouts, nil
	case hasBlocks:
		return KindTopology, nil
	}
	return "", &Problem{Message: fmt.Sprintf("cannot tell what this document is: a Kubernetes object has apiVersion and kind, a MIG layout file mig-configs, a topology file blocks; name it with --kind (%s)",
		strings.Join(Kinds[1:], ", "))}
}

// labGroup is the lab file's API group.
const labGroup = "lab.gpudra.dev"

// fromError turns a parser's error into problems: one per field error of an aggregate or
// field.ErrorList, else one whose message is the error (the parsers of layout and
// topology files start it with the field path).
func fromError(err error) []Problem {
	if err == nil {
		return nil
	}
	var agg utilerrors.Aggregate
	if errors.As(err, &agg) {
		var out []Problem
		for _, e := range agg.Errors() {
			out = append(out, fromError(e)...)
		}
		return out
	}
	var fe *field.Error
	if errors.As(err, &fe) {
		return []Problem{{Path: fe.Field, Message: fe.ErrorBody()}}
	}
	return []Problem{{Message: err.Error()}}
}

func fromFieldErrors(errs field.ErrorList) []Problem {
	var out []Problem
	for _, e := range errs {
		out = append(out, Problem{Path: e.Field, Message: e.ErrorBody()})
	}
	return out
}
