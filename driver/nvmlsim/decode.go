package nvmlsim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/gpudra/gpudra/internal/yamldoc"

	"sigs.k8s.io/yaml"
)

// Parse decodes and validates a profile. source names the input in errors (a file
// name); each problem is reported as "source: field.path: what is wrong".
func Parse(data []byte, source string) (*Profile, error) {
	if err := yamldoc.One(data, "a profile"); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	jsonData, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("%s: not valid YAML: %w", source, err)
	}
	var tree any
	dec := json.NewDecoder(bytes.NewReader(jsonData))
	dec.UseNumber()
	if err := dec.Decode(&tree); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	if _, ok := tree.(map[string]any); !ok {
		return nil, fmt.Errorf("%s: a profile must be a YAML mapping with at least name, gpu and pcie", source)
	}
	errs := &fieldErrors{source: source}
	checkShape(tree, reflect.TypeFor[Profile](), "", errs)
	if err := errs.err(); err != nil {
		return nil, err
	}
	p := &Profile{source: source}
	strict := json.NewDecoder(bytes.NewReader(jsonData))
	strict.DisallowUnknownFields()
	if err := strict.Decode(p); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	n, err := p.resolve()
	if err != nil {
		return nil, err
	}
	p.node = n
	return p, nil
}

// fieldErrors collects "path: message" problems of one source.
type fieldErrors struct {
	source string
	list   []string
}

func (e *fieldErrors) add(path, format string, args ...any) {
	if path == "" {
		path = "(top level)"
	}
	e.list = append(e.list, fmt.Sprintf("%s: %s: %s", e.source, path, fmt.Sprintf(format, args...)))
}

func (e *fieldErrors) err() error {
	if len(e.list) == 0 {
		return nil
	}
	errs := make([]error, len(e.list))
	for i, s := range e.list {
		errs[i] = errors.New(s)
	}
	return errors.Join(errs...)
}

func joinPath(base, field string) string {
	if base == "" {
		return field
	}
	return base + "." + field
}

var (
	flexStringType = reflect.TypeFor[flexString]()
	linkMatrixType = reflect.TypeFor[LinkMatrix]()
)

// checkShape walks the decoded document against the Go type t, reporting unknown
// fields and values of the wrong kind with their full path, which encoding/json
// cannot do.
func checkShape(v any, t reflect.Type, path string, errs *fieldErrors) {
	if v == nil {
		return
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t {
	case flexStringType:
		switch v.(type) {
		case string, json.Number:
		default:
			errs.add(path, "must be a string or a number, got %s", describe(v))
		}
		return
	case linkMatrixType:
		checkMatrixShape(v, path, errs)
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			errs.add(path, "must be a mapping, got %s", describe(v))
			return
		}
		fields := map[string]reflect.Type{}
		var names []string
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || name == "" || name == "-" {
				continue
			}
			fields[name] = f.Type
			names = append(names, name)
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			ft, ok := fields[k]
			if !ok {
				errs.add(joinPath(path, k), "unknown field; accepted fields are %s", strings.Join(names, ", "))
				continue
			}
			checkShape(m[k], ft, joinPath(path, k), errs)
		}
	case reflect.Slice:
		s, ok := v.([]any)
		if !ok {
			errs.add(path, "must be a list, got %s", describe(v))
			return
		}
		for i, e := range s {
			checkShape(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i), errs)
		}
	case reflect.String:
		if _, ok := v.(string); !ok {
			errs.add(path, "must be a string, got %s", describe(v))
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			errs.add(path, "must be true or false, got %s", describe(v))
		}
	case reflect.Int, reflect.Uint64:
		n, ok := v.(json.Number)
		if !ok {
			errs.add(path, "must be an integer, got %s", describe(v))
			return
		}
		i, err := strconv.ParseInt(n.String(), 10, 64)
		if err != nil || i < 0 || i > 1<<40 {
			errs.add(path, "must be an integer 0..%d, got %s", int64(1)<<40, n)
		}
	}
}

func checkMatrixShape(v any, path string, errs *fieldErrors) {
	switch m := v.(type) {
	case string:
	case []any:
		for i, row := range m {
			switch r := row.(type) {
			case string:
			case []any:
				for j, cell := range r {
					switch cell.(type) {
					case string, json.Number:
					default:
						errs.add(fmt.Sprintf("%s[%d][%d]", path, i, j), "link count must be an integer or \"-\", got %s", describe(cell))
					}
				}
			default:
				errs.add(fmt.Sprintf("%s[%d]", path, i), "a matrix row must be a string of cells or a list, got %s", describe(row))
			}
		}
	default:
		errs.add(path, "must be a block of rows (one row per GPU, cells separated by spaces) or a list of rows, got %s", describe(v))
	}
}

func describe(v any) string {
	switch x := v.(type) {
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case string:
		return strconv.Quote(x)
	case json.Number:
		return "the number " + x.String()
	case bool:
		return strconv.FormatBool(x)
	}
	return fmt.Sprintf("%v", v)
}

// flexString is a scalar written as a string or a number in YAML: "7.0", 12.2, 0x1DB510DE.
type flexString string

func (s *flexString) UnmarshalJSON(data []byte) error {
	var v any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return err
	}
	switch x := v.(type) {
	case string:
		*s = flexString(x)
	case json.Number:
		*s = flexString(x.String())
	case nil:
	default:
		return fmt.Errorf("expected a string or a number, got %s", describe(v))
	}
	return nil
}

// LinkMatrix holds NVLink counts per GPU pair as written: rows of cells that are an
// integer, "-" (no link) or "X" (the diagonal). In YAML it is a block string with one
// row per line, or a list of rows (each a string or a list of cells).
type LinkMatrix [][]string

func (m *LinkMatrix) UnmarshalJSON(data []byte) error {
	var v any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return err
	}
	switch x := v.(type) {
	case nil:
		*m = nil
	case string:
		*m = nil
		for line := range strings.SplitSeq(x, "\n") {
			if strings.TrimSpace(line) != "" {
				*m = append(*m, strings.Fields(line))
			}
		}
	case []any:
		out := make(LinkMatrix, len(x))
		for i, row := range x {
			switch r := row.(type) {
			case string:
				out[i] = strings.Fields(r)
			case []any:
				for _, cell := range r {
					out[i] = append(out[i], fmt.Sprint(cell))
				}
			default:
				return fmt.Errorf("nvlink.matrix[%d]: a row must be a string or a list", i)
			}
		}
		*m = out
	default:
		return errors.New("nvlink.matrix: must be a block of rows or a list of rows")
	}
	return nil
}
