package dynamo_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// The IAM parity test: terraform/iam.tf grants exactly the DynamoDB actions
// the code performs, per table (and per table's indexes), both ways — a
// call without its grant fails, and so does a grant no code uses. The calls
// are read from the source: every DynamoDB request literal
// (dynamodb.<Op>Input, and the items of a transaction, types.Put, Update,
// Delete, ConditionCheck, Get) in the service's packages, with the table its
// TableName (or a batch's RequestItems key) names. IAM has no action of its
// own for TransactWriteItems/TransactGetItems: each item needs the item
// action (PutItem, UpdateItem, DeleteItem, ConditionCheckItem, GetItem).

const moduleRoot = "../.."

// tableExprs maps, per package, how the code names a table to the Terraform
// table (resource name) it is at run time, as internal/app wires it. "admin"
// marks `migrate`'s table administration, on every table. A DynamoDB call
// naming its table any other way fails the test until it is added here.
var tableExprs = map[string]map[string][]string{
	"internal/events": {"s.table": {"events"}},
	"internal/billing/store": {
		"s.table": {"billing"}, "tx.store.table": {"billing"},
		"s.history": {"billing_history"},
		// listPage(ctx, table, …) lists subscriptions and receipts
		// (BILLING_TABLE) and history entries (BILLING_HISTORY_TABLE).
		"table": {"billing", "billing_history"},
	},
	"internal/lock": {"c.table": {"locks"}},
	"internal/dynamo": {
		"spec.Name": {"admin"},  // EnsureTables: every table of `migrate`
		"s.Name":    {"admin"},  // TableSpec.CreateTableInput, for EnsureTables
		"table":     {"events"}, // Ping: /readyz describes EVENTS_TABLE
	},
}

// skipDirs are not the service: test helpers, the load tool, benchmarks.
var skipDirs = regexp.MustCompile(`(^|/)(testdata|internal/testenv|internal/stripetest|internal/apptest|internal/billingtest|internal/loadtest|cmd/loadgen|bench|node_modules|\.dev|\.git)(/|$)`)

// call is one DynamoDB request the code makes.
type call struct {
	pkg, pos string
	op       string   // IAM action without the "dynamodb:" prefix
	tables   []string // Terraform table names, or "admin"
	index    bool     // Query/Scan on an index
	deletes  bool     // BatchWriteItem with delete requests
	cond     bool     // carries a ConditionExpression
}

// itemOps are the transaction items and the action each needs.
var itemOps = map[string]string{"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem", "ConditionCheck": "ConditionCheckItem", "Get": "GetItem"}

// noAction are request types without an IAM action of their own.
var noAction = map[string]bool{"TransactWriteItems": true, "TransactGetItems": true}

// scanCalls reads every DynamoDB request literal of the service's packages.
func scanCalls(t *testing.T, root string) []call {
	t.Helper()
	var calls []call
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if skipDirs.MatchString(rel) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		calls = append(calls, scanFile(t, fset, f, filepath.ToSlash(filepath.Dir(rel)))...)
		return nil
	})
	require.NoError(t, err)
	return calls
}

func scanFile(t *testing.T, fset *token.FileSet, f *ast.File, pkg string) []call {
	ddb, types := "", ""
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		name := filepath.Base(p)
		if imp.Name != nil {
			name = imp.Name.Name
		}
		switch p {
		case "github.com/aws/aws-sdk-go-v2/service/dynamodb":
			ddb = name
		case "github.com/aws/aws-sdk-go-v2/service/dynamodb/types":
			types = name
		}
	}
	if ddb == "" && types == "" {
		return nil
	}
	var calls []call
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			sel, ok := lit.Type.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			x, ok := sel.X.(*ast.Ident)
			if !ok {
				return true
			}
			c := call{pkg: pkg, pos: fset.Position(lit.Pos()).String()}
			switch {
			case x.Name == ddb && ddb != "" && strings.HasSuffix(sel.Sel.Name, "Input"):
				c.op = strings.TrimSuffix(sel.Sel.Name, "Input")
				if noAction[c.op] {
					return true
				}
			case x.Name == types && types != "" && itemOps[sel.Sel.Name] != "":
				c.op = itemOps[sel.Sel.Name]
			default:
				return true
			}
			fields := map[string]ast.Expr{}
			for _, el := range lit.Elts {
				if kv, ok := el.(*ast.KeyValueExpr); ok {
					if k, ok := kv.Key.(*ast.Ident); ok {
						fields[k.Name] = kv.Value
					}
				}
			}
			_, c.index = fields["IndexName"]
			_, c.cond = fields["ConditionExpression"]
			var names []string
			switch c.op {
			case "BatchWriteItem", "BatchGetItem":
				// The tables are the keys of the request maps built in
				// this function (retries reuse the answer's map).
				elem := "[]" + types + ".WriteRequest"
				if c.op == "BatchGetItem" {
					elem = types + ".KeysAndAttributes"
				}
				names = mapKeys(fset, fn.Body, elem)
				c.deletes = uses(fn.Body, types, "DeleteRequest")
			default:
				if e, ok := fields["TableName"]; ok {
					names = []string{render(fset, e)}
				}
			}
			if len(names) == 0 {
				t.Errorf("%s: %s names no table the test can read", c.pos, c.op)
				return true
			}
			for _, name := range names {
				c.tables = append(c.tables, name)
			}
			calls = append(calls, c)
			return true
		})
	}
	return calls
}

// render is the source of e without an aws.String(…) wrapper.
func render(fset *token.FileSet, e ast.Expr) string {
	if ce, ok := e.(*ast.CallExpr); ok && len(ce.Args) == 1 {
		if s, ok := ce.Fun.(*ast.SelectorExpr); ok && s.Sel.Name == "String" {
			e = ce.Args[0]
		}
	}
	var b bytes.Buffer
	_ = printer.Fprint(&b, fset, e)
	return b.String()
}

// mapKeys are the keys of the map literals map[string]<elem> in body.
func mapKeys(fset *token.FileSet, body ast.Node, elem string) []string {
	var keys []string
	ast.Inspect(body, func(n ast.Node) bool {
		lit, ok := n.(*ast.CompositeLit)
		if !ok {
			return true
		}
		mt, ok := lit.Type.(*ast.MapType)
		if !ok || render(fset, mt.Value) != elem {
			return true
		}
		for _, el := range lit.Elts {
			if kv, ok := el.(*ast.KeyValueExpr); ok {
				keys = append(keys, render(fset, kv.Key))
			}
		}
		return true
	})
	return keys
}

// uses reports whether body builds a types.<name> literal.
func uses(body ast.Node, pkg, name string) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if lit, ok := n.(*ast.CompositeLit); ok {
			if sel, ok := lit.Type.(*ast.SelectorExpr); ok && sel.Sel.Name == name {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == pkg {
					found = true
				}
			}
		}
		return !found
	})
	return found
}

// forwarded matches a TableName taken from a transaction item (a one-item
// transaction sent as a plain PutItem/DeleteItem): its tables are those of
// that item type's literals in the package.
var forwarded = regexp.MustCompile(`^\w+\.(Put|Update|Delete|ConditionCheck|Get)\.TableName$`)

// resolve maps each call's table expressions onto Terraform tables.
func resolve(t *testing.T, calls []call) []call {
	t.Helper()
	itemTables := map[string]map[string][]string{} // pkg -> item op -> table exprs
	for _, c := range calls {
		for _, name := range c.tables {
			if !forwarded.MatchString(name) && c.op != "BatchWriteItem" && c.op != "BatchGetItem" {
				if itemTables[c.pkg] == nil {
					itemTables[c.pkg] = map[string][]string{}
				}
				itemTables[c.pkg][c.op] = append(itemTables[c.pkg][c.op], name)
			}
		}
	}
	var out []call
	for _, c := range calls {
		var exprs []string
		for _, name := range c.tables {
			if m := forwarded.FindStringSubmatch(name); m != nil {
				exprs = append(exprs, itemTables[c.pkg][itemOps[m[1]]]...)
				continue
			}
			exprs = append(exprs, name)
		}
		r := c
		r.tables = nil
		seen := map[string]bool{}
		for _, e := range exprs {
			tables, ok := tableExprs[c.pkg][e]
			if !ok {
				t.Errorf("%s: %s on table %q: unknown to the IAM test; map it in tableExprs", c.pos, c.op, e)
				continue
			}
			for _, tb := range tables {
				if !seen[tb] {
					seen[tb] = true
					r.tables = append(r.tables, tb)
				}
			}
		}
		out = append(out, r)
	}
	return out
}

// grant is one action on one resource: "dynamodb:PutItem table/events",
// "dynamodb:Query table/events/index/*", "kms:Decrypt kms-key".
type grant string

// codeGrants are the grants the code needs, per policy ("service",
// "admin"), for tables (the Terraform table names).
func codeGrants(calls []call, tables []string) map[string]map[grant]bool {
	out := map[string]map[grant]bool{"service": {}, "admin": {}}
	for _, c := range calls {
		for _, tb := range c.tables {
			policy, targets := "service", []string{tb}
			if tb == "admin" {
				policy, targets = "admin", tables
			}
			for _, target := range targets {
				res := "table/" + target
				if c.index {
					res += "/index/*"
				}
				out[policy][grant("dynamodb:"+c.op+" "+res)] = true
			}
		}
	}
	return out
}

// kmsGrants are what the service needs on a customer managed key when it
// reads and writes encrypted tables (as AWS CDK's grantReadWriteData adds):
// reads need Decrypt and DescribeKey; writes also Encrypt, ReEncrypt and
// GenerateDataKey. `migrate` never creates an encrypted table (Terraform
// does), so the admin policy needs none.
func kmsGrants(service map[grant]bool) map[grant]bool {
	reads, writes := false, false
	for g := range service {
		action := strings.Fields(string(g))[0]
		switch strings.TrimPrefix(action, "dynamodb:") {
		case "GetItem", "BatchGetItem", "Query", "Scan":
			reads = true
		case "PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem":
			writes = true
		}
	}
	out := map[grant]bool{}
	if reads || writes {
		out["kms:Decrypt kms-key"], out["kms:DescribeKey kms-key"] = true, true
	}
	if writes {
		out["kms:Encrypt kms-key"], out["kms:ReEncrypt* kms-key"], out["kms:GenerateDataKey* kms-key"] = true, true, true
	}
	return out
}

// tfPolicies evaluates the aws_iam_policy_document data sources of dir into
// grants per document, with vars set as given (a null kms_key_arn and
// ses_identity_arn leave their statements out, a null
// stripe_event_source_name the EventBridge intake). A Deny statement's
// grants read "DENY <action> <resource>". kmsVia collects the
// kms:ViaService condition values of KMS statements.
func tfPolicies(t *testing.T, dir string, vars map[string]cty.Value) (map[string]map[grant]bool, []string) {
	t.Helper()
	ctx, bodies := tfEvalContext(t, dir, vars)
	out := map[string]map[grant]bool{}
	var kmsVia []string
	addStatement := func(doc string, ctx *hcl.EvalContext, body *hclsyntax.Body) {
		eval := func(name string) []string {
			attr, ok := body.Attributes[name]
			require.True(t, ok, "%s: a statement without %s", doc, name)
			return evalStrings(t, ctx, attr.Expr)
		}
		effect := ""
		if attr, ok := body.Attributes["effect"]; ok {
			v, _ := attr.Expr.Value(ctx)
			switch v.AsString() {
			case "Allow":
			case "Deny":
				effect = "DENY "
			default:
				t.Fatalf("%s: effect %s", doc, v.AsString())
			}
		}
		actions, resources := eval("actions"), eval("resources")
		for _, a := range actions {
			for _, r := range resources {
				if vars["kms_key_arn"].IsKnown() && !vars["kms_key_arn"].IsNull() && r == vars["kms_key_arn"].AsString() {
					r = "kms-key"
				}
				out[doc][grant(effect+a+" "+r)] = true
			}
		}
		for _, cb := range body.Blocks {
			if cb.Type != "condition" {
				continue
			}
			if v, _ := cb.Body.Attributes["variable"].Expr.Value(ctx); v.AsString() == "kms:ViaService" {
				kmsVia = append(kmsVia, evalStrings(t, ctx, cb.Body.Attributes["values"].Expr)...)
			}
		}
	}
	forPolicyDocs(t, ctx, bodies, func(doc string, ctx *hcl.EvalContext, body *hclsyntax.Body) {
		if out[doc] == nil {
			out[doc] = map[grant]bool{}
		}
		addStatement(doc, ctx, body)
	})
	return out, kmsVia
}

// evalStrings evaluates a list of strings.
func evalStrings(t *testing.T, ctx *hcl.EvalContext, expr hcl.Expression) []string {
	t.Helper()
	v, diags := expr.Value(ctx)
	require.False(t, diags.HasErrors(), diags.Error())
	var s []string
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		s = append(s, e.AsString())
	}
	return s
}

// forPolicyDocs calls statement for every statement of every
// aws_iam_policy_document of bodies (dynamic ones expanded, with their
// statement.value; a document whose count is 0 left out).
func forPolicyDocs(t *testing.T, ctx *hcl.EvalContext, bodies []*hclsyntax.Body, statement func(doc string, ctx *hcl.EvalContext, body *hclsyntax.Body)) {
	t.Helper()
	for _, body := range bodies {
		for _, b := range body.Blocks {
			if b.Type != "data" || len(b.Labels) != 2 || b.Labels[0] != "aws_iam_policy_document" {
				continue
			}
			doc := b.Labels[1]
			if count, ok := b.Body.Attributes["count"]; ok {
				v, diags := count.Expr.Value(ctx)
				require.False(t, diags.HasErrors(), diags.Error())
				if n, _ := v.AsBigFloat().Int64(); n == 0 {
					continue
				}
			}
			for _, sb := range b.Body.Blocks {
				switch {
				case sb.Type == "statement":
					statement(doc, ctx, sb.Body)
				case sb.Type == "dynamic" && len(sb.Labels) == 1 && sb.Labels[0] == "statement":
					forEach, diags := sb.Body.Attributes["for_each"].Expr.Value(ctx)
					require.False(t, diags.HasErrors(), diags.Error())
					for it := forEach.ElementIterator(); it.Next(); {
						k, v := it.Element()
						inner := ctx.NewChild()
						inner.Variables = map[string]cty.Value{"statement": cty.ObjectVal(map[string]cty.Value{"key": k, "value": v})}
						for _, cb := range sb.Body.Blocks {
							if cb.Type == "content" {
								statement(doc, inner, cb.Body)
							}
						}
					}
				default:
					t.Fatalf("%s: unexpected block %s", doc, sb.Type)
				}
			}
		}
	}
}

// tfEvalContext parses the .tf files of dir and returns what evaluates
// their policy documents: var (vars), local (the locals that evaluate),
// and the ARNs (and SQS queue ids) of the resources the documents name,
// "table/<name>", "queue/<name>", "rule/<name>"; a resource with a count
// exists once when stripe_event_source_name is set (withEventBridge, which
// also sets platform_event_bus_name), else not at all; one without a count
// always exists.
func tfEvalContext(t *testing.T, dir string, vars map[string]cty.Value) (*hcl.EvalContext, []*hclsyntax.Body) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.tf"))
	require.NoError(t, err)
	parser := hclparse.NewParser()
	var bodies []*hclsyntax.Body
	tables := map[string]cty.Value{}
	counted := map[string]map[string]cty.Value{"aws_sqs_queue": {}, "aws_cloudwatch_event_rule": {}}
	eventbridge := !vars["stripe_event_source_name"].IsNull()
	for _, path := range files {
		f, diags := parser.ParseHCLFile(path)
		require.False(t, diags.HasErrors(), diags.Error())
		body := f.Body.(*hclsyntax.Body)
		bodies = append(bodies, body)
		for _, b := range body.Blocks {
			if b.Type == "resource" && len(b.Labels) == 2 && b.Labels[0] == "aws_dynamodb_table" {
				tables[b.Labels[1]] = cty.ObjectVal(map[string]cty.Value{"arn": cty.StringVal("table/" + b.Labels[1])})
			}
			if b.Type == "resource" && len(b.Labels) == 2 && counted[b.Labels[0]] != nil {
				kind := map[string]string{"aws_sqs_queue": "queue/", "aws_cloudwatch_event_rule": "rule/"}[b.Labels[0]]
				one := cty.ObjectVal(map[string]cty.Value{
					"arn": cty.StringVal(kind + b.Labels[1]), "id": cty.StringVal("url/" + b.Labels[1]),
				})
				if _, ok := b.Body.Attributes["count"]; !ok {
					// Always there (the billing queue): not a list.
					counted[b.Labels[0]][b.Labels[1]] = one
					continue
				}
				instances := cty.EmptyTupleVal
				if eventbridge {
					instances = cty.TupleVal([]cty.Value{one})
				}
				counted[b.Labels[0]][b.Labels[1]] = instances
			}
		}
	}
	ctx := &hcl.EvalContext{
		Variables: map[string]cty.Value{
			"var":                       cty.ObjectVal(vars),
			"aws_dynamodb_table":        cty.ObjectVal(tables),
			"aws_sqs_queue":             cty.ObjectVal(counted["aws_sqs_queue"]),
			"aws_cloudwatch_event_rule": cty.ObjectVal(counted["aws_cloudwatch_event_rule"]),
		},
		Functions: map[string]function.Function{
			"concat": stdlib.ConcatFunc, "format": stdlib.FormatFunc,
			"join": stdlib.JoinFunc, "slice": stdlib.SliceFunc, "split": stdlib.SplitFunc,
		},
	}
	// locals may refer to each other across files: evaluate until settled.
	locals := map[string]cty.Value{}
	pending := map[string]hcl.Expression{}
	for _, body := range bodies {
		for _, b := range body.Blocks {
			if b.Type == "locals" {
				for name, attr := range b.Body.Attributes {
					pending[name] = attr.Expr
				}
			}
		}
	}
	// (Locals about other things, such as capacities, may stay unresolved:
	// a policy that used one would fail to evaluate below.)
	for progress := true; progress; {
		progress = false
		ctx.Variables["local"] = cty.ObjectVal(locals)
		for name, expr := range pending {
			if v, diags := expr.Value(ctx); !diags.HasErrors() {
				locals[name], progress = v, true
				delete(pending, name)
			}
		}
	}
	ctx.Variables["local"] = cty.ObjectVal(locals)
	return ctx, bodies
}

func tfVars(kms, ses bool) map[string]cty.Value {
	vars := map[string]cty.Value{
		"region":           cty.StringVal("eu-west-1"),
		"name_prefix":      cty.StringVal(tfPrefix),
		"kms_key_arn":      cty.NullVal(cty.String),
		"ses_identity_arn": cty.NullVal(cty.String),
		// SES_CONFIGURATION_SET: the set every email names (email.Sender).
		"ses_configuration_set": cty.NullVal(cty.String),
		// The EventBridge intake: off here, on with withEventBridge.
		"stripe_event_source_name":       cty.NullVal(cty.String),
		"eventbridge_visibility_timeout": cty.NumberIntVal(60),
		"eventbridge_max_receive_count":  cty.NumberIntVal(10),
		// The billing triggers intake (triggers.tf): off here, on with
		// withEventBridge (the evaluator has one switch for counted queues).
		"platform_event_bus_name":            cty.NullVal(cty.String),
		"billing_triggers_max_receive_count": cty.NumberIntVal(5),
	}
	if kms {
		vars["kms_key_arn"] = cty.StringVal("arn:aws:kms:eu-west-1:111122223333:key/test")
	}
	if ses {
		vars["ses_identity_arn"] = cty.StringVal("arn:aws:ses:eu-west-1:111122223333:identity/example.com")
		vars["ses_configuration_set"] = cty.StringVal("stripe-payments-reminders")
	}
	return vars
}

// onlyPrefix keeps the grants whose action starts with prefix.
func onlyPrefix(gs map[grant]bool, prefix string) map[grant]bool {
	out := map[grant]bool{}
	for g := range gs {
		if strings.HasPrefix(string(g), prefix) {
			out[g] = true
		}
	}
	return out
}

// diff lists a's grants that b lacks.
func diff(a, b map[grant]bool) []string {
	var out []string
	for g := range a {
		if !b[g] {
			out = append(out, string(g))
		}
	}
	sort.Strings(out)
	return out
}

// compareGrants fails for a call without a grant and a grant without a call.
func compareGrants(t *testing.T, what string, code, tf map[grant]bool) {
	t.Helper()
	assert.Empty(t, diff(code, tf), "%s: the code makes these calls, terraform/iam.tf does not grant them", what)
	assert.Empty(t, diff(tf, code), "%s: terraform/iam.tf grants these, no code uses them", what)
}

func tableNames(t *testing.T) []string {
	t.Helper()
	specs, err := parseTerraformDir(terraformDir)
	require.NoError(t, err)
	var names []string
	for name := range specs {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// TestIAMMatchesTheCode: the service and admin policies grant exactly the
// DynamoDB calls the code makes, per table and index; KMS grants appear
// exactly when kms_key_arn is set; the history table is append-only.
func TestIAMMatchesTheCode(t *testing.T) {
	calls := resolve(t, scanCalls(t, moduleRoot))
	require.False(t, t.Failed())
	require.NotEmpty(t, calls)
	want := codeGrants(calls, tableNames(t))
	for _, c := range calls {
		t.Logf("%-20s %-18s %v index=%v", c.pkg, c.op, c.tables, c.index)
	}

	sqsWant := sqsCodeGrants(t, moduleRoot)
	for _, tc := range []struct {
		name                  string
		kms, ses, eventbridge bool
	}{{"no KMS key, no SES, no EventBridge intake", false, false, false}, {"customer managed KMS key, SES and the EventBridge intake", true, true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			vars := tfVars(tc.kms, tc.ses)
			if tc.eventbridge {
				vars = withEventBridge(vars)
			}
			tf, via := tfPolicies(t, terraformDir, vars)
			compareGrants(t, "service", want["service"], onlyPrefix(tf["service"], "dynamodb:"))
			compareGrants(t, "admin", want["admin"], onlyPrefix(tf["admin"], "dynamodb:"))
			assert.Empty(t, onlyPrefix(tf["admin"], "kms:"), "migrate creates no encrypted table: no KMS grant")
			if tc.kms {
				compareGrants(t, "service KMS", kmsGrants(want["service"]), onlyPrefix(tf["service"], "kms:"))
				assert.Equal(t, []string{"dynamodb.eu-west-1.amazonaws.com"}, via, "the key is usable only through DynamoDB")
			} else {
				assert.Empty(t, onlyPrefix(tf["service"], "kms:"), "no KMS grant without kms_key_arn")
			}
			ses := onlyPrefix(tf["service"], "ses:")
			if tc.ses {
				// SES authorizes a send on the identity and on the
				// configuration set the email names (SES_CONFIGURATION_SET).
				assert.Equal(t, map[grant]bool{
					"ses:SendEmail arn:aws:ses:eu-west-1:111122223333:identity/example.com":                        true,
					"ses:SendEmail arn:aws:ses:eu-west-1:111122223333:configuration-set/stripe-payments-reminders": true,
				}, ses)
			} else {
				assert.Empty(t, ses)
			}
			if tc.eventbridge {
				compareGrants(t, "service SQS", sqsWant, onlyPrefix(tf["service"], "sqs:"))
			} else {
				// Without the intake, the billing queue's grants only.
				billingOnly := map[grant]bool{}
				for g := range sqsWant {
					if strings.HasSuffix(string(g), " queue/billing") {
						billingOnly[g] = true
					}
				}
				require.NotEmpty(t, billingOnly)
				compareGrants(t, "service SQS without the intake", billingOnly, onlyPrefix(tf["service"], "sqs:"))
			}
			assert.Empty(t, onlyPrefix(tf["admin"], "sqs:"))
			for _, doc := range []string{"service", "admin"} {
				for g := range tf[doc] {
					action := strings.Fields(string(g))[0]
					assert.Regexp(t, `^(dynamodb|kms|ses|sqs):`, action, "%s grants %s, which the test does not know", doc, g)
					assert.NotContains(t, string(g), "*:", "no wildcard actions")
				}
			}
		})
	}
}

// TestIAMHistoryIsAppendOnly: no code path can replace or delete a history
// entry. IAM cannot tell a BatchWriteItem put from a delete, nor a put that
// replaces from one that adds, so the history table gets neither
// BatchWriteItem, UpdateItem nor DeleteItem, and every put to it is
// conditional (the entry must not exist).
func TestIAMHistoryIsAppendOnly(t *testing.T) {
	calls := resolve(t, scanCalls(t, moduleRoot))
	puts := 0
	for _, c := range calls {
		for _, tb := range c.tables {
			if tb != "billing_history" {
				continue
			}
			switch c.op {
			case "PutItem":
				puts++
				assert.True(t, c.cond, "%s: a history put without a condition could replace an entry", c.pos)
			case "UpdateItem":
				// The erasure of personal data, and only it (docs/retention.md).
				assert.True(t, strings.Contains(filepath.ToSlash(c.pos), "internal/billing/store/erase.go:"),
					"%s: UpdateItem on the append-only history table outside the erasure", c.pos)
				assert.True(t, c.cond, "%s: the erasure's update must be conditioned on the entry existing", c.pos)
			case "GetItem", "BatchGetItem", "Query", "ConditionCheckItem":
			default:
				t.Errorf("%s: %s on the append-only history table", c.pos, c.op)
			}
		}
	}
	assert.Positive(t, puts, "the history is written somewhere")
	tf, _ := tfPolicies(t, terraformDir, tfVars(true, true))
	for g := range tf["service"] {
		if strings.Contains(string(g), "table/billing_history") {
			for _, bad := range []string{"BatchWriteItem", "DeleteItem", "PartiQL"} {
				assert.NotContains(t, string(g), bad)
			}
		}
	}
	// UpdateItem on history only in statements that restrict the attributes
	// to the key and the text the erasure rewrites.
	allowed := map[string]bool{"PK": true, "SK": true, "Error": true, "Cause": true, "UpdatedEvent": true}
	updates := 0
	ctx, bodies := tfEvalContext(t, terraformDir, tfVars(true, true))
	forPolicyDocs(t, ctx, bodies, func(doc string, ctx *hcl.EvalContext, body *hclsyntax.Body) {
		actions := evalStrings(t, ctx, body.Attributes["actions"].Expr)
		resources := evalStrings(t, ctx, body.Attributes["resources"].Expr)
		if !slices.ContainsFunc(actions, func(a string) bool { return strings.HasPrefix(a, "dynamodb:UpdateItem") || a == "dynamodb:*" }) ||
			!slices.ContainsFunc(resources, func(r string) bool { return strings.Contains(r, "table/billing_history") }) {
			return
		}
		updates++
		var attrs []string
		for _, cb := range body.Blocks {
			if cb.Type != "condition" {
				continue
			}
			test, _ := cb.Body.Attributes["test"].Expr.Value(ctx)
			variable, _ := cb.Body.Attributes["variable"].Expr.Value(ctx)
			if test.AsString() == "ForAllValues:StringEquals" && variable.AsString() == "dynamodb:Attributes" {
				attrs = evalStrings(t, ctx, cb.Body.Attributes["values"].Expr)
			}
		}
		require.NotEmpty(t, attrs, "%s: UpdateItem on the history table without a dynamodb:Attributes condition could rewrite any entry", doc)
		for _, a := range attrs {
			assert.True(t, allowed[a], "%s: the history erasure may change %s", doc, a)
		}
	})
	assert.Equal(t, 1, updates, "one statement grants the history erasure's UpdateItem")
}

// TestIAMParityDetectsDrift: the comparison fails when either side moves: a
// grant removed, a grant added, a call added.
func TestIAMParityDetectsDrift(t *testing.T) {
	calls := resolve(t, scanCalls(t, moduleRoot))
	want := codeGrants(calls, tableNames(t))
	tf, _ := tfPolicies(t, terraformDir, tfVars(false, false))
	got := onlyPrefix(tf["service"], "dynamodb:")
	require.Empty(t, diff(want["service"], got))
	require.Empty(t, diff(got, want["service"]))

	removed := map[grant]bool{}
	for g := range got {
		if g != "dynamodb:GetItem table/locks" {
			removed[g] = true
		}
	}
	assert.Equal(t, []string{"dynamodb:GetItem table/locks"}, diff(want["service"], removed), "a missing grant is found")
	added := map[grant]bool{"dynamodb:DeleteItem table/billing_history": true}
	for g := range got {
		added[g] = true
	}
	assert.Equal(t, []string{"dynamodb:DeleteItem table/billing_history"}, diff(added, want["service"]), "an unused grant is found")

	// A new call in the code, read by the scanner from source.
	dir := t.TempDir()
	pkg := filepath.Join(dir, "internal", "events")
	require.NoError(t, os.MkdirAll(pkg, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(pkg, "x.go"), []byte(`package events

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func (s *Store) wipe(ctx context.Context, k map[string]types.AttributeValue) {
	_, _ = s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.table), Key: k})
	_, _ = s.client.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(s.table), IndexName: aws.String("x")})
}
`), 0o644))
	extra := codeGrants(resolve(t, scanCalls(t, dir)), tableNames(t))["service"]
	assert.Equal(t, map[grant]bool{"dynamodb:DeleteItem table/events": true, "dynamodb:Scan table/events/index/*": true}, extra)
	assert.Equal(t, []string{"dynamodb:DeleteItem table/events", "dynamodb:Scan table/events/index/*"}, diff(extra, got))
}

// TestIAMSESGrant: with an SES identity the service may send from it, and
// when the emails name a configuration set (SES_CONFIGURATION_SET), SES
// also authorizes the send on that set: without its ARN every send is
// refused.
func TestIAMSESGrant(t *testing.T) {
	identity := "arn:aws:ses:eu-west-1:111122223333:identity/example.com"
	for _, tc := range []struct {
		name          string
		identity, set cty.Value
		want          map[grant]bool
	}{
		{"no identity: no SES grant", cty.NullVal(cty.String), cty.NullVal(cty.String), map[grant]bool{}},
		{"identity, no configuration set", cty.StringVal(identity), cty.NullVal(cty.String),
			map[grant]bool{grant("ses:SendEmail " + identity): true}},
		{"identity and configuration set", cty.StringVal(identity), cty.StringVal("reminders"), map[grant]bool{
			grant("ses:SendEmail " + identity):                                             true,
			"ses:SendEmail arn:aws:ses:eu-west-1:111122223333:configuration-set/reminders": true,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars := tfVars(false, false)
			vars["ses_identity_arn"], vars["ses_configuration_set"] = tc.identity, tc.set
			tf, _ := tfPolicies(t, terraformDir, vars)
			assert.Equal(t, tc.want, onlyPrefix(tf["service"], "ses:"))
		})
	}
}
