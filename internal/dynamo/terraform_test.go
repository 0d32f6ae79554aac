package dynamo_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/stretchr/testify/require"
	"github.com/zclconf/go-cty/cty"

	"github.com/stripe-payments/stripe-payments/internal/app"
	"github.com/stripe-payments/stripe-payments/internal/config"
	"github.com/stripe-payments/stripe-payments/internal/dynamo"
)

const terraformDir = "../../terraform"

// tfPrefix is the default name_prefix; with it the Terraform table names
// equal the service's default *_TABLE names.
const tfPrefix = "stripe-payments"

// codeSpecs are the tables `migrate` creates with the default configuration
// (whose table names are "stripe-payments-<name>"), keyed by their Terraform
// resource name (<name> with "_" for "-"). A table added to the code without
// Terraform, or the reverse, fails the parity test.
func codeSpecs() map[string]dynamo.TableSpec {
	cfg, err := config.Load(func(k string) (string, bool) { return "development", k == "APP_ENV" })
	if err != nil {
		panic(err)
	}
	specs := map[string]dynamo.TableSpec{}
	for _, s := range app.TableSpecs(cfg) {
		specs[strings.ReplaceAll(strings.TrimPrefix(s.Name, tfPrefix+"-"), "-", "_")] = s
	}
	return specs
}

func TestTerraformMatchesTableSpecs(t *testing.T) {
	tf, err := parseTerraformDir(terraformDir)
	require.NoError(t, err)
	require.NoError(t, compareSpecs(codeSpecs(), tf))
}

// The parity check must fail when either side drifts.
func TestTerraformParityDetectsDrift(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(terraformDir, "dynamodb.tf"))
	require.NoError(t, err)
	tfEdits := []struct{ name, from, to string }{
		{"GSI renamed", `"date-time-index"`, `"date-index"`},
		{"projected attribute changed", `["type", "subscription"]`, `["type"]`},
		{"projection type changed", `"KEYS_ONLY"`, `"ALL"`},
		{"TTL attribute changed", `attribute_name = "expiration"`, `attribute_name = "expires"`},
		{"hash key changed", `hash_key                    = "id"`, `hash_key                    = "event_id"`},
		{"index sort key changed", `range_key          = "timestamp"`, `range_key          = "time"`},
		{"billing GSI renamed", `"GSI-2"`, `"payments-index"`},
		{"billing projection changed", `["SKU", "Email", "NextPaymentDate"]`, `["SKU", "Email"]`},
		{"locks TTL changed", `attribute_name = "deleteOn"`, `attribute_name = "expires"`},
		{"billing table dropped", `resource "aws_dynamodb_table" "billing_history"`, `resource "aws_dynamodb_table_replica" "billing_history"`},
	}
	for _, e := range tfEdits {
		t.Run("terraform: "+e.name, func(t *testing.T) {
			require.Contains(t, string(src), e.from)
			dir := t.TempDir()
			edited := strings.Replace(string(src), e.from, e.to, 1)
			require.NoError(t, os.WriteFile(filepath.Join(dir, "dynamodb.tf"), []byte(edited), 0o600))
			// Drift shows either as an invalid file or as a difference.
			tf, err := parseTerraformDir(dir)
			if err == nil {
				err = compareSpecs(codeSpecs(), tf)
			}
			require.Error(t, err)
		})
	}
	codeEdits := []struct {
		name string
		edit func(*dynamo.TableSpec)
	}{
		{"GSI renamed", func(s *dynamo.TableSpec) { s.Indexes[1].Name = "account-index" }},
		{"projected attribute added", func(s *dynamo.TableSpec) {
			s.Indexes[2].Projection.NonKey = append(s.Indexes[2].Projection.NonKey, "status")
		}},
		{"TTL removed", func(s *dynamo.TableSpec) { s.TTLAttribute = "" }},
		{"index dropped", func(s *dynamo.TableSpec) { s.Indexes = s.Indexes[:2] }},
	}
	tf, err := parseTerraformDir(terraformDir)
	require.NoError(t, err)
	for _, e := range codeEdits {
		t.Run("code: "+e.name, func(t *testing.T) {
			specs := codeSpecs()
			s := specs["events"]
			s.Indexes = append([]dynamo.Index(nil), s.Indexes...)
			e.edit(&s)
			specs["events"] = s
			require.Error(t, compareSpecs(specs, tf))
		})
	}
}

// compareSpecs reports every difference between the code's and Terraform's tables.
func compareSpecs(code, tf map[string]dynamo.TableSpec) error {
	var diffs []string
	for name, want := range code {
		got, ok := tf[name]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("table %s: missing in terraform", name))
			continue
		}
		if a, b := describe(want), describe(got); a != b {
			diffs = append(diffs, fmt.Sprintf("table %s differs:\n  code:      %s\n  terraform: %s", name, a, b))
		}
	}
	for name := range tf {
		if _, ok := code[name]; !ok {
			diffs = append(diffs, fmt.Sprintf("table %s: in terraform but not in the code", name))
		}
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		return fmt.Errorf("terraform and table specs differ:\n%s", strings.Join(diffs, "\n"))
	}
	return nil
}

// describe renders a spec canonically (indexes sorted, projections sorted).
func describe(s dynamo.TableSpec) string {
	var ix []string
	for _, i := range s.Indexes {
		nonKey := append([]string(nil), i.Projection.NonKey...)
		sort.Strings(nonKey)
		ix = append(ix, fmt.Sprintf("%s(%s,%s,%s%v)", i.Name, i.PartitionKey, i.SortKey, i.Projection.Type, nonKey))
	}
	sort.Strings(ix)
	return fmt.Sprintf("name=%s pk=%s sk=%s ttl=%s indexes=%v", s.Name, s.PartitionKey, s.SortKey, s.TTLAttribute, ix)
}

// parseTerraformDir reads every aws_dynamodb_table resource of the .tf files in dir.
func parseTerraformDir(dir string) (map[string]dynamo.TableSpec, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.tf"))
	if err != nil {
		return nil, err
	}
	ctx := &hcl.EvalContext{Variables: map[string]cty.Value{
		"var": cty.ObjectVal(map[string]cty.Value{"name_prefix": cty.StringVal(tfPrefix)}),
	}}
	parser := hclparse.NewParser()
	specs := map[string]dynamo.TableSpec{}
	for _, path := range files {
		f, diags := parser.ParseHCLFile(path)
		if diags.HasErrors() {
			return nil, fmt.Errorf("parse %s: %s", path, diags.Error())
		}
		for _, block := range f.Body.(*hclsyntax.Body).Blocks {
			if block.Type != "resource" || len(block.Labels) != 2 || block.Labels[0] != "aws_dynamodb_table" {
				continue
			}
			spec, err := tableFromBlock(ctx, block.Body)
			if err != nil {
				return nil, fmt.Errorf("%s: aws_dynamodb_table.%s: %w", path, block.Labels[1], err)
			}
			specs[block.Labels[1]] = spec
		}
	}
	return specs, nil
}

func tableFromBlock(ctx *hcl.EvalContext, body *hclsyntax.Body) (dynamo.TableSpec, error) {
	var s dynamo.TableSpec
	var err error
	str := func(b *hclsyntax.Body, name string) string {
		if err != nil {
			return ""
		}
		attr, ok := b.Attributes[name]
		if !ok {
			return ""
		}
		v, diags := attr.Expr.Value(ctx)
		if diags.HasErrors() || v.Type() != cty.String {
			err = fmt.Errorf("%s is not a static string", name)
			return ""
		}
		return v.AsString()
	}
	s.Name = str(body, "name")
	s.PartitionKey = str(body, "hash_key")
	s.SortKey = str(body, "range_key")
	declared := map[string]string{}
	for _, b := range body.Blocks {
		switch b.Type {
		case "attribute":
			declared[str(b.Body, "name")] = str(b.Body, "type")
		case "ttl":
			s.TTLAttribute = str(b.Body, "attribute_name")
		case "global_secondary_index":
			ix := dynamo.Index{
				Name:         str(b.Body, "name"),
				PartitionKey: str(b.Body, "hash_key"),
				SortKey:      str(b.Body, "range_key"),
				Projection:   dynamo.Projection{Type: types.ProjectionType(str(b.Body, "projection_type"))},
			}
			if attr, ok := b.Body.Attributes["non_key_attributes"]; ok {
				v, diags := attr.Expr.Value(ctx)
				if diags.HasErrors() {
					return s, fmt.Errorf("non_key_attributes: %s", diags.Error())
				}
				for _, e := range v.AsValueSlice() {
					ix.Projection.NonKey = append(ix.Projection.NonKey, e.AsString())
				}
			}
			s.Indexes = append(s.Indexes, ix)
		}
	}
	if err != nil {
		return s, err
	}
	// Every key attribute is declared as a string, and nothing else is.
	keys := map[string]bool{s.PartitionKey: true}
	if s.SortKey != "" {
		keys[s.SortKey] = true
	}
	for _, ix := range s.Indexes {
		keys[ix.PartitionKey] = true
		if ix.SortKey != "" {
			keys[ix.SortKey] = true
		}
	}
	for k := range keys {
		if declared[k] != "S" {
			return s, fmt.Errorf("key attribute %s is not declared with type S", k)
		}
	}
	for k := range declared {
		if !keys[k] {
			return s, fmt.Errorf("attribute %s is declared but is no key", k)
		}
	}
	return s, nil
}
