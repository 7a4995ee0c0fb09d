package v1alpha1

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Decode strictly decodes one configuration object (JSON, or YAML as users write it):
// apiVersion must be gpu.gpudra.dev/v1alpha1, kind one of Kinds, and unknown or
// duplicate fields are errors naming the field. It neither normalizes nor validates.
func Decode(raw []byte) (Config, error) {
	return decodeAt(raw, nil)
}

// decodeAt decodes with field paths below path (nil for the object itself).
func decodeAt(raw []byte, path *field.Path) (Config, error) {
	data := bytes.TrimSpace(raw)
	if len(data) == 0 {
		return nil, field.Required(path, "a "+APIVersion+" object (kind "+strings.Join(Kinds, " or ")+")")
	}
	if data[0] != '{' {
		if n, err := documents(data); err != nil {
			return nil, field.Invalid(path, "", "not JSON or YAML: "+err.Error())
		} else if n > 1 {
			return nil, field.Invalid(path, "", fmt.Sprintf("%d YAML documents; a config is one object, without --- separators", n))
		}
		var err error
		if data, err = yaml.YAMLToJSON(data); err != nil {
			return nil, field.Invalid(path, "", "not JSON or YAML: "+err.Error())
		}
	}
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, field.Invalid(path, "", "not a JSON object: "+err.Error())
	}
	if head.APIVersion != APIVersion {
		return nil, field.NotSupported(path.Child("apiVersion"), head.APIVersion, []string{APIVersion})
	}
	var obj Config
	switch head.Kind {
	case GpuConfigKind:
		obj = &GpuConfig{}
	case MigConfigKind:
		obj = &MigConfig{}
	default:
		return nil, field.NotSupported(path.Child("kind"), head.Kind, Kinds)
	}
	strict, err := sigsjson.UnmarshalStrict(data, obj, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return nil, field.Invalid(path, "", fmt.Sprintf("decoding %s: %v", head.Kind, err))
	}
	if len(strict) > 0 {
		var errs field.ErrorList
		for _, e := range strict {
			errs = append(errs, strictError(path, head.Kind, e))
		}
		return nil, errs.ToAggregate()
	}
	return obj, nil
}

// strictError turns `unknown field "sharing.foo"` into a field error at sharing.foo.
func strictError(path *field.Path, kind string, err error) *field.Error {
	msg := err.Error()
	for _, prefix := range []string{"unknown field ", "duplicate field "} {
		if rest, ok := strings.CutPrefix(msg, prefix); ok {
			if name, uerr := strconv.Unquote(rest); uerr == nil {
				p := path
				for _, part := range strings.Split(name, ".") {
					p = p.Child(part)
				}
				return field.Forbidden(p, strings.TrimSpace(prefix)+" in "+kind)
			}
		}
	}
	return field.Invalid(path, "", fmt.Sprintf("decoding %s: %v", kind, msg))
}

// documents counts the non-empty YAML documents of data.
func documents(data []byte) (int, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	n := 0
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		if len(bytes.TrimSpace(doc)) > 0 && !onlyComments(doc) {
			n++
		}
	}
}

func onlyComments(doc []byte) bool {
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if l := bytes.TrimSpace(line); len(l) > 0 && l[0] != '#' && !bytes.Equal(l, []byte("---")) {
			return false
		}
	}
	return true
}
