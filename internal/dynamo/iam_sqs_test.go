package dynamo_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// The EventBridge intake's side of the IAM parity (terraform/eventbridge.tf
// and the service policy of terraform/iam.tf): the service may do on the
// queue exactly the SQS calls the code makes (read from the source, as the
// DynamoDB calls are), and only the Stripe rule may send to the queue and
// its dead-letter queue.

// sqsActions maps an SQS request (sqs.<Op>Input) to its IAM action: a
// batch call needs the action of its single form.
var sqsActions = map[string]string{
	"ReceiveMessage":               "sqs:ReceiveMessage",
	"DeleteMessage":                "sqs:DeleteMessage",
	"DeleteMessageBatch":           "sqs:DeleteMessage",
	"ChangeMessageVisibility":      "sqs:ChangeMessageVisibility",
	"ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
	"SendMessage":                  "sqs:SendMessage",
	"SendMessageBatch":             "sqs:SendMessage",
	"GetQueueAttributes":           "sqs:GetQueueAttributes",
}

// queueExprs maps, per package, how the code names a queue (its QueueUrl,
// without aws.String) to the Terraform queue it is at run time.
var queueExprs = map[string]map[string]string{
	"internal/eventbridge":     {"c.cfg.QueueURL": "eventbridge"},                          // EVENTBRIDGE_QUEUE_URL
	"internal/billing/trigger": {"c.cfg.QueueURL": "billing_triggers"},                     // BILLING_TRIGGERS_QUEUE_URL
	"internal/billingqueue":    {"w.cfg.QueueURL": "billing", "e.cfg.QueueURL": "billing"}, // BILLING_QUEUE_URL
}

// sqsCodeGrants reads every SQS request literal of the service's packages
// under root into the grants it needs ("sqs:DeleteMessage queue/eventbridge").
func sqsCodeGrants(t *testing.T, root string) map[grant]bool {
	t.Helper()
	out := map[grant]bool{}
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
		name := ""
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "github.com/aws/aws-sdk-go-v2/service/sqs" {
				name = "sqs"
				if imp.Name != nil {
					name = imp.Name.Name
				}
			}
		}
		if name == "" {
			return nil
		}
		pkg := filepath.ToSlash(filepath.Dir(rel))
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			sel, ok := lit.Type.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); !ok || x.Name != name || !strings.HasSuffix(sel.Sel.Name, "Input") {
				return true
			}
			op := strings.TrimSuffix(sel.Sel.Name, "Input")
			pos := fset.Position(lit.Pos()).String()
			action, ok := sqsActions[op]
			if !ok {
				t.Errorf("%s: SQS %s is unknown to the IAM test; add its IAM action to sqsActions", pos, op)
				return true
			}
			var queue ast.Expr
			for _, el := range lit.Elts {
				if kv, ok := el.(*ast.KeyValueExpr); ok {
					if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "QueueUrl" {
						queue = kv.Value
					}
				}
			}
			if queue == nil {
				t.Errorf("%s: SQS %s names no queue the test can read", pos, op)
				return true
			}
			tf, ok := queueExprs[pkg][render(fset, queue)]
			if !ok {
				t.Errorf("%s: SQS %s on queue %q: unknown to the IAM test; map it in queueExprs", pos, op, render(fset, queue))
				return true
			}
			out[grant(action+" queue/"+tf)] = true
			return true
		})
		return nil
	})
	require.NoError(t, err)
	return out
}

// withEventBridge turns the SQS intakes on in vars: the EventBridge intake
// and the billing triggers queue (triggers.tf).
func withEventBridge(vars map[string]cty.Value) map[string]cty.Value {
	out := map[string]cty.Value{}
	for k, v := range vars {
		out[k] = v
	}
	out["stripe_event_source_name"] = cty.StringVal("aws.partner/stripe.com/ed_test_61RM8ltWcTW4mbsxf16RJyfa2xSQLHJJh1sxm7H0KVT6")
	out["platform_event_bus_name"] = cty.StringVal("platform-bus")
	return out
}

// TestIAMEventBridgeMatchesTheCode: the code's SQS calls are exactly
// receive, delete and change-visibility on the intake's queue, and send,
// receive, delete, change-visibility and get-attributes on the billing
// queue; the service policy grants exactly those (TestIAMMatchesTheCode
// compares the two both ways; this pins what they are).
func TestIAMEventBridgeMatchesTheCode(t *testing.T) {
	want := sqsCodeGrants(t, moduleRoot)
	assert.Equal(t, map[grant]bool{
		"sqs:ReceiveMessage queue/eventbridge":          true,
		"sqs:DeleteMessage queue/eventbridge":           true,
		"sqs:ChangeMessageVisibility queue/eventbridge": true,
		// The billing triggers intake: the same, and the queue's
		// attributes (its redrive policy, checked at start).
		"sqs:ReceiveMessage queue/billing_triggers":          true,
		"sqs:DeleteMessage queue/billing_triggers":           true,
		"sqs:ChangeMessageVisibility queue/billing_triggers": true,
		"sqs:GetQueueAttributes queue/billing_triggers":      true,
		"sqs:SendMessage queue/billing":                      true,
		"sqs:ReceiveMessage queue/billing":                   true,
		"sqs:DeleteMessage queue/billing":                    true,
		"sqs:ChangeMessageVisibility queue/billing":          true,
		"sqs:GetQueueAttributes queue/billing":               true,
	}, want)
	tf, _ := tfPolicies(t, terraformDir, withEventBridge(tfVars(false, false)))
	compareGrants(t, "service SQS", want, onlyPrefix(tf["service"], "sqs:"))
}

// statement is one statement of a policy document, evaluated.
type statement struct {
	Effect     string
	Actions    []string
	Resources  []string
	Principals []string // "type:identifier"
	Conditions []string // "test variable value"
}

// policyStatements evaluates every statement of every policy document.
func policyStatements(t *testing.T, vars map[string]cty.Value) map[string][]statement {
	t.Helper()
	ctx, bodies := tfEvalContext(t, terraformDir, vars)
	out := map[string][]statement{}
	forPolicyDocs(t, ctx, bodies, func(doc string, ctx *hcl.EvalContext, body *hclsyntax.Body) {
		st := statement{Effect: "Allow"}
		if attr, ok := body.Attributes["effect"]; ok {
			v, diags := attr.Expr.Value(ctx)
			require.False(t, diags.HasErrors(), diags.Error())
			st.Effect = v.AsString()
		}
		st.Actions = evalStrings(t, ctx, body.Attributes["actions"].Expr)
		st.Resources = evalStrings(t, ctx, body.Attributes["resources"].Expr)
		for _, b := range body.Blocks {
			switch b.Type {
			case "principals":
				typ, _ := b.Body.Attributes["type"].Expr.Value(ctx)
				for _, id := range evalStrings(t, ctx, b.Body.Attributes["identifiers"].Expr) {
					st.Principals = append(st.Principals, typ.AsString()+":"+id)
				}
			case "condition":
				test, _ := b.Body.Attributes["test"].Expr.Value(ctx)
				variable, _ := b.Body.Attributes["variable"].Expr.Value(ctx)
				for _, v := range evalStrings(t, ctx, b.Body.Attributes["values"].Expr) {
					st.Conditions = append(st.Conditions, test.AsString()+" "+variable.AsString()+" "+v)
				}
			}
		}
		out[doc] = append(out[doc], st)
	})
	return out
}

// TestIAMOnlyTheStripeRuleSendsToTheQueues: each queue's policy allows
// EventBridge to send only on behalf of the Stripe rule, and denies every
// other sender; with the intake off there is no such policy.
func TestIAMOnlyTheStripeRuleSendsToTheQueues(t *testing.T) {
	docs := policyStatements(t, withEventBridge(tfVars(false, false)))
	for doc, queue := range map[string]string{"eventbridge_queue": "queue/eventbridge", "eventbridge_dlq": "queue/eventbridge_dlq"} {
		assert.Equal(t, []statement{
			{Effect: "Allow", Actions: []string{"sqs:SendMessage"}, Resources: []string{queue},
				Principals: []string{"Service:events.amazonaws.com"}, Conditions: []string{"ArnEquals aws:SourceArn rule/stripe"}},
			{Effect: "Deny", Actions: []string{"sqs:SendMessage"}, Resources: []string{queue},
				Principals: []string{"*:*"}, Conditions: []string{"ArnNotEquals aws:SourceArn rule/stripe"}},
		}, docs[doc], doc)
	}
	off := policyStatements(t, tfVars(false, false))
	assert.NotContains(t, off, "eventbridge_queue")
	assert.NotContains(t, off, "eventbridge_dlq")
}

// TestIAMOnlyThePlatformRuleSendsToTheTriggersQueues: the same for the
// billing triggers queues (triggers.tf) and the platform's rule.
func TestIAMOnlyThePlatformRuleSendsToTheTriggersQueues(t *testing.T) {
	docs := policyStatements(t, withEventBridge(tfVars(false, false)))
	for doc, queue := range map[string]string{"billing_triggers_queue": "queue/billing_triggers", "billing_triggers_dlq": "queue/billing_triggers_dlq"} {
		assert.Equal(t, []statement{
			{Effect: "Allow", Actions: []string{"sqs:SendMessage"}, Resources: []string{queue},
				Principals: []string{"Service:events.amazonaws.com"}, Conditions: []string{"ArnEquals aws:SourceArn rule/billing_triggers"}},
			{Effect: "Deny", Actions: []string{"sqs:SendMessage"}, Resources: []string{queue},
				Principals: []string{"*:*"}, Conditions: []string{"ArnNotEquals aws:SourceArn rule/billing_triggers"}},
		}, docs[doc], doc)
	}
	off := policyStatements(t, tfVars(false, false))
	assert.NotContains(t, off, "billing_triggers_queue")
	assert.NotContains(t, off, "billing_triggers_dlq")
}

// resourceAttrs evaluates the attributes (not blocks) of a resource.
func resourceAttrs(t *testing.T, kind, name string) (map[string]cty.Value, *hclsyntax.Body) {
	t.Helper()
	ctx, bodies := tfEvalContext(t, terraformDir, withEventBridge(tfVars(false, false)))
	ctx.Functions["jsonencode"] = stdlib.JSONEncodeFunc
	for _, body := range bodies {
		for _, b := range body.Blocks {
			if b.Type == "resource" && len(b.Labels) == 2 && b.Labels[0] == kind && b.Labels[1] == name {
				out := map[string]cty.Value{}
				for k, attr := range b.Body.Attributes {
					if v, diags := attr.Expr.Value(ctx); !diags.HasErrors() {
						out[k] = v
					}
				}
				return out, b.Body
			}
		}
	}
	t.Fatalf("terraform has no %s.%s", kind, name)
	return nil, nil
}

func jsonAttr(t *testing.T, v cty.Value) map[string]any {
	t.Helper()
	require.True(t, v.IsKnown() && !v.IsNull(), "attribute evaluated")
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(v.AsString()), &m))
	return m
}

// TestTerraformEventBridgeQueues: both queues are encrypted at rest; the
// queue redrives to its dead-letter queue, which takes only its redrives;
// the rule targets the queue (and its undeliverable events the DLQ) and
// matches Stripe's partner source only; the bus is the partner event bus.
func TestTerraformEventBridgeQueues(t *testing.T) {
	for _, q := range []string{"eventbridge", "eventbridge_dlq"} {
		attrs, _ := resourceAttrs(t, "aws_sqs_queue", q)
		assert.True(t, attrs["sqs_managed_sse_enabled"].True(), "%s: server-side encryption", q)
	}
	queue, _ := resourceAttrs(t, "aws_sqs_queue", "eventbridge")
	assert.Equal(t, map[string]any{"deadLetterTargetArn": "queue/eventbridge_dlq", "maxReceiveCount": float64(10)},
		jsonAttr(t, queue["redrive_policy"]))
	visibility, _ := queue["visibility_timeout_seconds"].AsBigFloat().Int64()
	assert.GreaterOrEqual(t, visibility, int64(30), "longer than one ingest (INGEST_TIMEOUT + INGEST_BATCH_TIMEOUT)")
	allow, _ := resourceAttrs(t, "aws_sqs_queue_redrive_allow_policy", "eventbridge_dlq")
	assert.Equal(t, map[string]any{"redrivePermission": "byQueue", "sourceQueueArns": []any{"queue/eventbridge"}},
		jsonAttr(t, allow["redrive_allow_policy"]))

	rule, _ := resourceAttrs(t, "aws_cloudwatch_event_rule", "stripe")
	assert.Equal(t, map[string]any{"source": []any{map[string]any{"prefix": "aws.partner/stripe.com/"}}},
		jsonAttr(t, rule["event_pattern"]))
	target, body := resourceAttrs(t, "aws_cloudwatch_event_target", "stripe")
	assert.Equal(t, "queue/eventbridge", target["arn"].AsString())
	var dlq []string
	for _, b := range body.Blocks {
		if b.Type == "dead_letter_config" {
			ctx, _ := tfEvalContext(t, terraformDir, withEventBridge(tfVars(false, false)))
			v, diags := b.Body.Attributes["arn"].Expr.Value(ctx)
			require.False(t, diags.HasErrors(), diags.Error())
			dlq = append(dlq, v.AsString())
		}
	}
	assert.Equal(t, []string{"queue/eventbridge_dlq"}, dlq)

	src, err := os.ReadFile(filepath.Join(terraformDir, "eventbridge.tf"))
	require.NoError(t, err)
	assert.Contains(t, string(src), "event_source_name = var.stripe_event_source_name", "the bus is the partner event bus of Stripe's source")
}

// TestIAMEventBridgeParityDetectsDrift: an SQS call added to the code is
// found, and so is a grant removed from or added to the service policy.
func TestIAMEventBridgeParityDetectsDrift(t *testing.T) {
	tf, _ := tfPolicies(t, terraformDir, withEventBridge(tfVars(false, false)))
	got := onlyPrefix(tf["service"], "sqs:")
	want := sqsCodeGrants(t, moduleRoot)
	require.Empty(t, diff(want, got))
	require.Empty(t, diff(got, want))

	dir := t.TempDir()
	pkg := filepath.Join(dir, "internal", "eventbridge")
	require.NoError(t, os.MkdirAll(pkg, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(pkg, "x.go"), []byte(`package eventbridge

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

func (c *Consumer) requeue(ctx context.Context, body string) {
	_, _ = c.api.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(c.cfg.QueueURL), MessageBody: aws.String(body)})
}
`), 0o644))
	extra := sqsCodeGrants(t, dir)
	assert.Equal(t, []string{"sqs:SendMessage queue/eventbridge"}, diff(extra, got), "a call without its grant is found")

	removed := map[grant]bool{}
	for g := range got {
		if g != "sqs:ChangeMessageVisibility queue/eventbridge" {
			removed[g] = true
		}
	}
	assert.Equal(t, []string{"sqs:ChangeMessageVisibility queue/eventbridge"}, diff(want, removed), "a missing grant is found")
	added := map[grant]bool{"sqs:PurgeQueue queue/eventbridge": true}
	for g := range got {
		added[g] = true
	}
	assert.Equal(t, []string{"sqs:PurgeQueue queue/eventbridge"}, diff(added, want), "an unused grant is found")
}
