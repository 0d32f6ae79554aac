package deploycheck_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/stretchr/testify/require"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
	ctyjson "github.com/zclconf/go-cty/cty/json"
)

// The Terraform root, evaluated as far as a plan would know it without AWS:
// variables (the test's, else their defaults), locals, and every resource
// and data source as an object whose computed attributes are placeholders
// that name the resource ("arn:aws_sqs_queue.eventbridge[0]"), so a value
// can be traced back to what it refers to. `terraform validate` needs the
// AWS provider, which cannot be downloaded here.

const terraformDir = "../../terraform"

// Placeholders of computed attributes.
const (
	testRegion  = "eu-west-1"
	testAccount = "111122223333"
)

// module is one evaluation of a Terraform root.
type module struct {
	t      *testing.T
	ctx    *hcl.EvalContext
	blocks []*hclsyntax.Block
}

// instance is one instance of a resource or data source: its address, its
// body, and the context its attributes evaluate in (count.index, each.*).
type instance struct {
	m    *module
	addr string
	body *hclsyntax.Body
	ctx  *hcl.EvalContext
}

var functions = map[string]function.Function{
	"jsonencode": stdlib.JSONEncodeFunc,
	"merge":      stdlib.MergeFunc,
	"concat":     stdlib.ConcatFunc,
	"format":     stdlib.FormatFunc,
	"join":       stdlib.JoinFunc,
	"slice":      stdlib.SliceFunc,
	"split":      stdlib.SplitFunc,
	"keys":       stdlib.KeysFunc,
	"values":     stdlib.ValuesFunc,
	"sort":       stdlib.SortFunc,
	"length":     stdlib.LengthFunc,
	"coalesce":   stdlib.CoalesceFunc,
	"contains":   stdlib.ContainsFunc,
	"toset":      stdlib.MakeToFunc(cty.Set(cty.DynamicPseudoType)),
}

// loadModule parses the .tf files of dir and evaluates them with vars.
func loadModule(t *testing.T, dir string, vars map[string]cty.Value) *module {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.tf"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no .tf files in %s", dir)
	parser := hclparse.NewParser()
	m := &module{t: t, ctx: &hcl.EvalContext{Variables: map[string]cty.Value{}, Functions: functions}}
	for _, path := range files {
		f, diags := parser.ParseHCLFile(path)
		require.False(t, diags.HasErrors(), "%s: %s", path, diags.Error())
		m.blocks = append(m.blocks, f.Body.(*hclsyntax.Body).Blocks...)
	}

	values := map[string]cty.Value{}
	for _, b := range m.blocks {
		if b.Type != "variable" {
			continue
		}
		name := b.Labels[0]
		if v, ok := vars[name]; ok {
			values[name] = v
			continue
		}
		def, ok := b.Body.Attributes["default"]
		require.True(t, ok, "variable %s has no default: the test must set it", name)
		v, diags := def.Expr.Value(nil)
		require.False(t, diags.HasErrors(), "variable %s: %s", name, diags.Error())
		values[name] = v
	}
	for name := range vars {
		require.Contains(t, values, name, "the test sets variable %s, which terraform/ does not declare", name)
	}
	m.ctx.Variables["var"] = cty.ObjectVal(values)

	// Resources, data sources and locals refer to each other: evaluate
	// until nothing changes.
	locals := map[string]cty.Value{}
	for round := 0; round < 6; round++ {
		m.ctx.Variables["local"] = cty.ObjectVal(locals)
		resources, data := map[string]map[string]cty.Value{}, map[string]map[string]cty.Value{}
		for _, b := range m.blocks {
			switch b.Type {
			case "resource":
				add(resources, b.Labels[0], b.Labels[1], m.objects(b))
			case "data":
				add(data, b.Labels[0], b.Labels[1], m.objects(b))
			}
		}
		for typ, byName := range resources {
			m.ctx.Variables[typ] = cty.ObjectVal(byName)
		}
		dataVals := map[string]cty.Value{}
		for typ, byName := range data {
			dataVals[typ] = cty.ObjectVal(byName)
		}
		m.ctx.Variables["data"] = cty.ObjectVal(dataVals)
		next := map[string]cty.Value{}
		for _, b := range m.blocks {
			if b.Type != "locals" {
				continue
			}
			for name, attr := range b.Body.Attributes {
				if v, diags := attr.Expr.Value(m.ctx); !diags.HasErrors() {
					next[name] = v
				}
			}
		}
		locals = next
	}
	m.ctx.Variables["local"] = cty.ObjectVal(locals)
	return m
}

func add(into map[string]map[string]cty.Value, typ, name string, v cty.Value) {
	if into[typ] == nil {
		into[typ] = map[string]cty.Value{}
	}
	into[typ][name] = v
}

// objects is the value a reference to block evaluates to: an object, a
// tuple of them (count) or a map of them (for_each); unknown while what
// it depends on is.
func (m *module) objects(b *hclsyntax.Block) cty.Value {
	insts, ok := m.instancesOf(b)
	if !ok {
		return cty.DynamicVal
	}
	switch {
	case b.Body.Attributes["count"] != nil:
		if len(insts) == 0 {
			return cty.EmptyTupleVal
		}
		vals := make([]cty.Value, len(insts))
		for i, in := range insts {
			vals[i] = in.object()
		}
		return cty.TupleVal(vals)
	case b.Body.Attributes["for_each"] != nil:
		vals := map[string]cty.Value{}
		for _, in := range insts {
			vals[in.key()] = in.object()
		}
		return cty.ObjectVal(vals)
	default:
		return insts[0].object()
	}
}

// instancesOf expands a block's count or for_each.
func (m *module) instancesOf(b *hclsyntax.Block) ([]instance, bool) {
	addr := b.Labels[0] + "." + b.Labels[1]
	if b.Type == "data" {
		addr = "data." + addr
	}
	if c, ok := b.Body.Attributes["count"]; ok {
		v, diags := c.Expr.Value(m.ctx)
		if diags.HasErrors() || !v.IsWhollyKnown() {
			return nil, false
		}
		n, _ := v.AsBigFloat().Int64()
		var out []instance
		for i := int64(0); i < n; i++ {
			ctx := m.ctx.NewChild()
			ctx.Variables = map[string]cty.Value{"count": cty.ObjectVal(map[string]cty.Value{"index": cty.NumberIntVal(i)})}
			out = append(out, instance{m: m, addr: fmt.Sprintf("%s[%d]", addr, i), body: b.Body, ctx: ctx})
		}
		return out, true
	}
	if fe, ok := b.Body.Attributes["for_each"]; ok {
		v, diags := fe.Expr.Value(m.ctx)
		if diags.HasErrors() || !v.IsWhollyKnown() {
			return nil, false
		}
		var out []instance
		for it := v.ElementIterator(); it.Next(); {
			k, val := it.Element()
			if v.Type().IsSetType() {
				k = val
			}
			ctx := m.ctx.NewChild()
			ctx.Variables = map[string]cty.Value{"each": cty.ObjectVal(map[string]cty.Value{"key": k, "value": val})}
			out = append(out, instance{m: m, addr: fmt.Sprintf("%s[%q]", addr, k.AsString()), body: b.Body, ctx: ctx})
		}
		return out, true
	}
	return []instance{{m: m, addr: addr, body: b.Body, ctx: m.ctx}}, true
}

// key is a for_each instance's key.
func (in instance) key() string {
	i := strings.Index(in.addr, "[")
	return strings.Trim(in.addr[i+1:len(in.addr)-1], `"`)
}

// object is what a reference to this instance sees: its own name, and
// placeholders for what AWS computes.
func (in instance) object() cty.Value {
	name := "name:" + in.addr
	if attr, ok := in.body.Attributes["name"]; ok {
		if v, diags := attr.Expr.Value(in.ctx); !diags.HasErrors() && v.IsKnown() && !v.IsNull() && v.Type() == cty.String {
			name = v.AsString()
		}
	}
	attrs := map[string]cty.Value{
		"arn":                  cty.StringVal("arn:" + in.addr),
		"arn_without_revision": cty.StringVal("arn:" + in.addr + ":family"),
		"arn_suffix":           cty.StringVal("suffix:" + in.addr),
		"id":                   cty.StringVal("id:" + in.addr),
		"name":                 cty.StringVal(name),
		"dns_name":             cty.StringVal(strings.NewReplacer("[", "-", "]", "", `"`, "", ".", "-").Replace(in.addr) + ".elb.test"),
		"json":                 cty.StringVal("json:" + in.addr),
		"url":                  cty.StringVal(fmt.Sprintf("https://sqs.%s.amazonaws.com/%s/%s", testRegion, testAccount, name)),
		"cidr_block":           cty.StringVal("10.0.0.0/20"),
		"account_id":           cty.StringVal(testAccount),
	}
	return cty.ObjectVal(attrs)
}

// instances lists every instance of the resources of type typ.
func (m *module) instances(typ string) []instance {
	m.t.Helper()
	var out []instance
	for _, b := range m.blocks {
		if b.Type == "resource" && b.Labels[0] == typ {
			insts, ok := m.instancesOf(b)
			require.True(m.t, ok, "%s.%s: count or for_each does not evaluate", typ, b.Labels[1])
			out = append(out, insts...)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].addr < out[j].addr })
	return out
}

// resource is the one instance of a resource without count or for_each,
// or the only instance of one with them; ok is false when it has none.
func (m *module) resource(typ, name string) (instance, bool) {
	for _, in := range m.instances(typ) {
		if in.addr == typ+"."+name || strings.HasPrefix(in.addr, typ+"."+name+"[") {
			return in, true
		}
	}
	return instance{}, false
}

// byAddr is the instance at addr.
func (m *module) byAddr(addr string) (instance, bool) {
	typ, _, _ := strings.Cut(addr, ".")
	for _, in := range m.instances(typ) {
		if in.addr == addr {
			return in, true
		}
	}
	return instance{}, false
}

// names reports whether v refers to the instance at addr: by a placeholder
// (its ARN or id) or by its name.
func (m *module) names(v, addr string) bool {
	if refersTo(v) == addr {
		return true
	}
	in, ok := m.byAddr(addr)
	return ok && in.has("name") && in.str("name") == v
}

// computed is what a reference to the instance's computed attribute
// (arn_suffix, dns_name...) evaluates to.
func (in instance) computed(name string) string {
	return in.object().GetAttr(name).AsString()
}

// has reports whether the instance sets attribute name.
func (in instance) has(name string) bool {
	_, ok := in.body.Attributes[name]
	return ok
}

// attr evaluates an attribute; a missing one is null.
func (in instance) attr(name string) cty.Value {
	in.m.t.Helper()
	a, ok := in.body.Attributes[name]
	if !ok {
		return cty.NullVal(cty.DynamicPseudoType)
	}
	v, diags := a.Expr.Value(in.ctx)
	require.False(in.m.t, diags.HasErrors(), "%s.%s: %s", in.addr, name, diags.Error())
	require.True(in.m.t, v.IsWhollyKnown(), "%s.%s does not evaluate to a known value", in.addr, name)
	return v
}

// str evaluates a string attribute ("" when missing or null).
func (in instance) str(name string) string {
	v := in.attr(name)
	if v.IsNull() {
		return ""
	}
	return v.AsString()
}

// num evaluates a number attribute (0 when missing).
func (in instance) num(name string) int64 {
	v := in.attr(name)
	if v.IsNull() {
		return 0
	}
	n, _ := v.AsBigFloat().Int64()
	return n
}

// strs evaluates a list or set of strings.
func (in instance) strs(name string) []string {
	v := in.attr(name)
	var out []string
	if v.IsNull() {
		return nil
	}
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		out = append(out, e.AsString())
	}
	return out
}

// json decodes an attribute that is JSON text (jsonencode) into out.
func (in instance) json(name string, out any) {
	in.m.t.Helper()
	v := in.attr(name)
	require.False(in.m.t, v.IsNull(), "%s.%s is not set", in.addr, name)
	require.NoError(in.m.t, jsonUnmarshal(v.AsString(), out), "%s.%s", in.addr, name)
}

// goValue turns any evaluated attribute into plain Go values (maps,
// slices, strings, float64, bool) through JSON.
func (in instance) goValue(name string, out any) {
	in.m.t.Helper()
	v := in.attr(name)
	b, err := ctyjson.Marshal(v, v.Type())
	require.NoError(in.m.t, err)
	require.NoError(in.m.t, jsonUnmarshal(string(b), out), "%s.%s", in.addr, name)
}

// blocks returns the nested blocks of type typ, in the instance's context.
func (in instance) blocks(typ string) []instance {
	var out []instance
	for _, b := range in.body.Blocks {
		if b.Type == typ {
			out = append(out, instance{m: in.m, addr: in.addr + "." + typ, body: b.Body, ctx: in.ctx})
		}
	}
	return out
}

// block is the one nested block of type typ.
func (in instance) block(typ string) instance {
	in.m.t.Helper()
	bs := in.blocks(typ)
	require.Len(in.m.t, bs, 1, "%s: one %s block", in.addr, typ)
	return bs[0]
}

// policyStatements expands the statements of an aws_iam_policy_document,
// dynamic ones with their statement.value.
func (m *module) policyStatements(name string) []instance {
	m.t.Helper()
	for _, b := range m.blocks {
		if b.Type != "data" || b.Labels[0] != "aws_iam_policy_document" || b.Labels[1] != name {
			continue
		}
		doc := instance{m: m, addr: "data.aws_iam_policy_document." + name, body: b.Body, ctx: m.ctx}
		out := doc.blocks("statement")
		for _, d := range b.Body.Blocks {
			if d.Type != "dynamic" || d.Labels[0] != "statement" {
				continue
			}
			dyn := instance{m: m, addr: doc.addr, body: d.Body, ctx: m.ctx}
			forEach := dyn.attr("for_each")
			for it := forEach.ElementIterator(); it.Next(); {
				k, v := it.Element()
				ctx := m.ctx.NewChild()
				ctx.Variables = map[string]cty.Value{"statement": cty.ObjectVal(map[string]cty.Value{"key": k, "value": v})}
				content := instance{m: m, addr: doc.addr + ".dynamic", body: d.Body, ctx: ctx}.block("content")
				out = append(out, content)
			}
		}
		return out
	}
	m.t.Fatalf("terraform has no aws_iam_policy_document %s", name)
	return nil
}

// edit replaces the one occurrence of from in a file of the root.
type edit struct{ file, from, to string }

// editedCopy copies the Terraform root to a temporary directory with the
// edits made and returns the directory.
func editedCopy(t *testing.T, edits ...edit) string {
	t.Helper()
	dir := t.TempDir()
	files, err := filepath.Glob(filepath.Join(terraformDir, "*.tf"))
	require.NoError(t, err)
	for _, path := range files {
		src, err := os.ReadFile(path)
		require.NoError(t, err)
		for _, e := range edits {
			if filepath.Base(path) == e.file {
				require.Equal(t, 1, strings.Count(string(src), e.from), "%s: the edit's text occurs once", e.file)
				src = []byte(strings.Replace(string(src), e.from, e.to, 1))
			}
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, filepath.Base(path)), src, 0o600))
	}
	return dir
}
