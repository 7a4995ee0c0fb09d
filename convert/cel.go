package convert

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"unicode"

	"github.com/google/cel-go/common"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/parser"
	dracel "k8s.io/dynamic-resource-allocation/cel"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// A CEL expression is converted by editing its text at the places its parse tree points
// to (the domain literal and the attribute's name), so the rest of it stays as written.
// The result is parsed again and must reference exactly the mapped names, and it must
// compile in Kubernetes' DRA CEL environment.

// span is a range of rune offsets in an expression.
type span struct{ start, stop int32 }

// celRef is one use of device.attributes or device.capacity.
type celRef struct {
	field  string // "attributes" or "capacity"
	domain string // "": the map of domains is used otherwise than by a literal domain
	name   string // "": the domain's map is used otherwise than by a literal name
	// domainAt is the domain's string literal; nameAt the name: an identifier after the
	// '.' at nameAt (nameLit false) or a string literal.
	domainAt, nameAt span
	nameLit          bool
}

func (r celRef) key() string { return r.field + "/" + r.domain + "/" + r.name }

type celLit struct {
	value string
	at    span
}

type celInfo struct {
	refs []celRef
	// lits are the string literals other than the domains and names of refs.
	lits []celLit
	// typeValues are the string literals an attributes' type is compared with.
	typeValues []string
}

var celParser = func() *parser.Parser {
	p, err := parser.NewParser(parser.Macros(parser.AllMacros...), parser.PopulateMacroCalls(true))
	if err != nil {
		panic(err)
	}
	return p
}()

func inspectCEL(expr string) (*celInfo, error) {
	tree, errs := celParser.Parse(common.NewTextSource(expr))
	if errs != nil && len(errs.GetErrors()) > 0 {
		return nil, fmt.Errorf("%s", strings.TrimSpace(errs.ToDisplayString()))
	}
	w := &celWalker{si: tree.SourceInfo(), info: &celInfo{}}
	w.walk(tree.Expr())
	return w.info, nil
}

type celWalker struct {
	si   *ast.SourceInfo
	info *celInfo
}

func (w *celWalker) at(e ast.Expr) span {
	r, _ := w.si.GetOffsetRange(e.ID())
	return span{r.Start, r.Stop}
}

func stringLit(e ast.Expr) (string, bool) {
	if e.Kind() != ast.LiteralKind {
		return "", false
	}
	s, ok := e.AsLiteral().Value().(string)
	return s, ok
}

// deviceMap matches device.attributes and device.capacity.
func deviceMap(e ast.Expr) (string, bool) {
	if e.Kind() != ast.SelectKind {
		return "", false
	}
	s := e.AsSelect()
	if s.IsTestOnly() || s.Operand().Kind() != ast.IdentKind || s.Operand().AsIdent() != "device" {
		return "", false
	}
	if f := s.FieldName(); f == "attributes" || f == "capacity" {
		return f, true
	}
	return "", false
}

// domainMap matches device.attributes["domain"] (and capacity).
func (w *celWalker) domainMap(e ast.Expr) (celRef, bool) {
	if e.Kind() != ast.CallKind {
		return celRef{}, false
	}
	c := e.AsCall()
	if c.FunctionName() != "_[_]" || len(c.Args()) != 2 {
		return celRef{}, false
	}
	field, ok := deviceMap(c.Args()[0])
	if !ok {
		return celRef{}, false
	}
	d, ok := stringLit(c.Args()[1])
	if !ok {
		return celRef{}, false
	}
	return celRef{field: field, domain: d, domainAt: w.at(c.Args()[1])}, true
}

// named matches a use of one name of a domain's map: m.name, has(m.name), m["name"]
// and "name" in m.
func (w *celWalker) named(e ast.Expr) (celRef, bool) {
	switch e.Kind() {
	case ast.SelectKind:
		s := e.AsSelect()
		ref, ok := w.domainMap(s.Operand())
		if !ok {
			return celRef{}, false
		}
		ref.name, ref.nameAt = s.FieldName(), w.at(e)
		if s.IsTestOnly() {
			// has(m.name): the select that says where name is written is the macro's argument.
			call, found := w.si.GetMacroCall(e.ID())
			if !found || call.Kind() != ast.CallKind || len(call.AsCall().Args()) != 1 {
				return celRef{}, false
			}
			ref.nameAt = w.at(call.AsCall().Args()[0])
		}
		return ref, true
	case ast.CallKind:
		c := e.AsCall()
		if len(c.Args()) != 2 {
			return celRef{}, false
		}
		m, n := c.Args()[0], c.Args()[1]
		switch c.FunctionName() {
		case "_[_]":
		case "@in":
			m, n = n, m
		default:
			return celRef{}, false
		}
		ref, ok := w.domainMap(m)
		if !ok {
			return celRef{}, false
		}
		name, ok := stringLit(n)
		if !ok {
			return celRef{}, false
		}
		ref.name, ref.nameAt, ref.nameLit = name, w.at(n), true
		return ref, true
	}
	return celRef{}, false
}

func (w *celWalker) walk(e ast.Expr) {
	if ref, ok := w.named(e); ok {
		w.info.refs = append(w.info.refs, ref)
		return
	}
	if ref, ok := w.domainMap(e); ok {
		w.info.refs = append(w.info.refs, celRef{field: ref.field, domain: ref.domain, domainAt: ref.domainAt})
		return
	}
	if field, ok := deviceMap(e); ok {
		w.info.refs = append(w.info.refs, celRef{field: field})
		return
	}
	switch e.Kind() {
	case ast.LiteralKind:
		if s, ok := stringLit(e); ok {
			w.info.lits = append(w.info.lits, celLit{value: s, at: w.at(e)})
		}
	case ast.SelectKind:
		w.walk(e.AsSelect().Operand())
	case ast.CallKind:
		c := e.AsCall()
		if fn := c.FunctionName(); (fn == "_==_" || fn == "_!=_") && len(c.Args()) == 2 {
			for i, a := range c.Args() {
				if ref, ok := w.named(a); ok && ref.field == "attributes" && ref.name == "type" {
					if v, ok := stringLit(c.Args()[1-i]); ok {
						w.info.typeValues = append(w.info.typeValues, v)
					}
				}
			}
		}
		if c.IsMemberFunction() {
			w.walk(c.Target())
		}
		for _, a := range c.Args() {
			w.walk(a)
		}
	case ast.ListKind:
		for _, x := range e.AsList().Elements() {
			w.walk(x)
		}
	case ast.MapKind:
		for _, en := range e.AsMap().Entries() {
			w.walk(en.AsMapEntry().Key())
			w.walk(en.AsMapEntry().Value())
		}
	case ast.StructKind:
		for _, f := range e.AsStruct().Fields() {
			w.walk(f.AsStructField().Value())
		}
	case ast.ComprehensionKind:
		c := e.AsComprehension()
		for _, x := range []ast.Expr{c.IterRange(), c.AccuInit(), c.LoopCondition(), c.LoopStep(), c.Result()} {
			w.walk(x)
		}
	}
}

// celResult is a converted expression, or why it could not be converted.
type celResult struct {
	expr    string
	changed bool
	// changes says what was renamed, e.g. `profile → migProfile`.
	changes []string
	whys    []string
}

var plainValue = regexp.MustCompile(`^[A-Za-z0-9._/-]+$`)

// convertCEL rewrites an expression written for NVIDIA's driver so that it reads gpudra's
// attributes and capacities of a device of kind k. derived marks a derived attribute's
// expression (it need not evaluate to a bool).
func convertCEL(expr string, k kind, derived bool) celResult {
	info, err := inspectCEL(expr)
	if err != nil {
		return celResult{whys: []string{"does not parse as CEL: " + err.Error()}}
	}
	var res celResult
	why := func(format string, args ...any) { res.whys = append(res.whys, fmt.Sprintf(format, args...)) }
	var edits []celEdit
	var want []string
	// guard are attributes that only some devices of kind k carry: the selector is
	// guarded by has(), so that it selects only devices that carry them and fails on none.
	var guard []target
	for _, r := range info.refs {
		switch {
		case r.domain == "":
			why("uses device.%s other than with a literal domain, so its names cannot be checked", r.field)
		case r.domain == nvDriver && r.name == "":
			why("uses device.%s[%q] other than by a literal name, so its names cannot be checked", r.field, nvDriver)
		case r.domain == nvDriver:
			var t target
			if r.field == "capacity" {
				t = nvCapacity(k, r.name)
			} else {
				t = nvAttribute(k, r.name)
			}
			if t.why != "" {
				why("%s %q: %s", singular(r.field), r.name, t.why)
				continue
			}
			if !publishes(k, r.field, t.domain, t.name) {
				why("%s %q: gpudra's %ss do not publish %s/%s", singular(r.field), r.name, k, t.domain, t.name)
				continue
			}
			if t.staticMIG {
				if derived {
					why("%s %q: %s, so a derived attribute would fail on the others", singular(r.field), r.name, staticMIGOnly)
					continue
				}
				guard = append(guard, t)
			}
			edits = append(edits, celEdit{at: r.domainAt, value: t.domain, lit: true})
			if t.name != r.name {
				edits = append(edits, celEdit{at: r.nameAt, value: t.name, lit: r.nameLit, old: r.name})
			}
			switch {
			case t.domain != api.DriverName:
				res.changes = append(res.changes, fmt.Sprintf("%s/%s → %s/%s", nvDriver, r.name, t.domain, t.name))
			case t.name != r.name:
				res.changes = append(res.changes, r.name+" → "+t.name)
			}
			want = append(want, celRef{field: r.field, domain: t.domain, name: t.name}.key())
		case r.name == "":
			if r.domain == api.DriverName || r.domain == stdDomain {
				want = append(want, r.key())
				continue
			}
			why("uses device.%s[%q], a domain gpudra's devices do not publish", r.field, r.domain)
		case r.domain == api.DriverName || r.domain == stdDomain:
			if !publishes(k, r.field, r.domain, r.name) {
				why("%s %s/%s: gpudra's %ss do not publish it", singular(r.field), r.domain, r.name, k)
				continue
			}
			want = append(want, r.key())
		default:
			why("%s %s/%s: a domain gpudra's devices do not publish", singular(r.field), r.domain, r.name)
		}
	}
	for _, l := range info.lits {
		switch {
		case l.value == nvDriver:
			edits = append(edits, celEdit{at: l.at, value: api.DriverName, lit: true})
		case strings.Contains(l.value, "nvidia.com"):
			why("names %q, which has no gpudra equivalent", l.value)
		}
	}
	for _, v := range info.typeValues {
		if v != k.deviceType() {
			why("compares the device type with %q, but gpudra's %ss have type %q", v, k, k.deviceType())
		}
	}
	if len(res.whys) > 0 {
		return res
	}
	out, err := applyEdits(expr, edits)
	if err != nil {
		return celResult{whys: []string{err.Error()}}
	}
	if len(guard) > 0 {
		var has []string
		seen := map[string]bool{}
		for _, t := range guard {
			if seen[t.name] {
				continue
			}
			seen[t.name] = true
			has = append(has, fmt.Sprintf("has(device.attributes[%q].%s)", t.domain, t.name))
			want = append(want, celRef{field: "attributes", domain: t.domain, name: t.name}.key())
			res.changes = append(res.changes, "guarded by "+has[len(has)-1]+": "+staticMIGOnly)
		}
		// The expression goes on lines of its own, so that a comment at its end does not
		// swallow the closing parenthesis.
		out = strings.Join(has, " && ") + " && (\n" + out + "\n)"
	}
	if err := checkConverted(out, want, derived); err != nil {
		return celResult{whys: []string{err.Error()}}
	}
	res.expr, res.changed = out, out != expr
	return res
}

// checkConverted parses a converted expression again: it must reference exactly want
// and compile in Kubernetes' DRA CEL environment.
func checkConverted(expr string, want []string, derived bool) error {
	info, err := inspectCEL(expr)
	if err != nil {
		return fmt.Errorf("the converted expression does not parse: %v", err)
	}
	var got []string
	for _, r := range info.refs {
		got = append(got, r.key())
	}
	sort.Strings(got)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		return fmt.Errorf("the converted expression reads %v, want %v", got, want)
	}
	for _, l := range info.lits {
		if l.value == nvDriver {
			return fmt.Errorf("the converted expression still names %q", nvDriver)
		}
	}
	c := dracel.GetCompiler(dracel.Features{EnableConsumableCapacity: true, EnableListTypeAttributes: true}).
		CompileCELExpression(expr, dracel.Options{DerivedAttribute: derived})
	if c.Error != nil {
		return fmt.Errorf("the converted expression does not compile: %s", c.Error.Detail)
	}
	return nil
}

func singular(field string) string {
	if field == "capacity" {
		return "capacity"
	}
	return "attribute"
}

// celEdit replaces a string literal's value (lit) or the identifier after the '.' at `at`.
type celEdit struct {
	at    span
	value string
	lit   bool
	old   string // the identifier being replaced (identifiers only)
}

func applyEdits(expr string, edits []celEdit) (string, error) {
	src := []rune(expr)
	type repl struct {
		start, stop int
		text        string
	}
	var rs []repl
	for _, e := range edits {
		if !plainValue.MatchString(e.value) {
			return "", fmt.Errorf("internal: %q is not a plain name", e.value)
		}
		start, stop := int(e.at.start), int(e.at.stop)
		if start < 0 || stop > len(src) || start >= stop {
			return "", fmt.Errorf("cannot locate a name to rewrite in the expression")
		}
		if e.lit {
			t, err := requote(string(src[start:stop]), e.value)
			if err != nil {
				return "", err
			}
			rs = append(rs, repl{start, stop, t})
			continue
		}
		// An identifier after '.': skip blanks and comments, then the name, maybe in backquotes.
		i := stop
		for i < len(src) {
			if unicode.IsSpace(src[i]) {
				i++
				continue
			}
			if i+1 < len(src) && src[i] == '/' && src[i+1] == '/' {
				for i < len(src) && src[i] != '\n' {
					i++
				}
				continue
			}
			break
		}
		old := []rune(e.old)
		quoted := i < len(src) && src[i] == '`'
		if quoted {
			i++
		}
		if i+len(old) > len(src) || string(src[i:i+len(old)]) != e.old {
			return "", fmt.Errorf("cannot locate %q in the expression", e.old)
		}
		end := i + len(old)
		if quoted {
			if end >= len(src) || src[end] != '`' {
				return "", fmt.Errorf("cannot locate %q in the expression", e.old)
			}
		} else if end < len(src) && (unicode.IsLetter(src[end]) || unicode.IsDigit(src[end]) || src[end] == '_') {
			return "", fmt.Errorf("cannot locate %q in the expression", e.old)
		}
		rs = append(rs, repl{i, end, e.value})
	}
	sort.Slice(rs, func(a, b int) bool { return rs[a].start > rs[b].start })
	for k := 1; k < len(rs); k++ {
		if rs[k].stop > rs[k-1].start {
			return "", fmt.Errorf("internal: overlapping rewrites")
		}
	}
	for _, r := range rs {
		src = append(src[:r.start], append([]rune(r.text), src[r.stop:]...)...)
	}
	return string(src), nil
}

// requote writes value as a string literal quoted the way lit is.
func requote(lit, value string) (string, error) {
	prefix := ""
	if strings.HasPrefix(lit, "r") || strings.HasPrefix(lit, "R") {
		prefix, lit = lit[:1], lit[1:]
	}
	for _, q := range []string{`"""`, `'''`, `"`, `'`} {
		if strings.HasPrefix(lit, q) && strings.HasSuffix(lit, q) && len(lit) >= 2*len(q) {
			return prefix + q + value + q, nil
		}
	}
	return "", fmt.Errorf("cannot rewrite the string literal %s", lit)
}
