package metrics_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// boundedLabels are the label names a metric family may carry, each with
// what bounds its values. A label whose values grow with the business (an
// account, a customer, a subscription, an event) makes one series per
// value: on a platform with many merchants that is an unbounded number of
// series for Prometheus to hold. Per-account figures belong in the console
// and the internal API, not in labels; a new label goes here only with its
// bound.
var boundedLabels = map[string]string{
	"api_version": "Stripe API versions (signed events only; a handful in use)",
	"class":       "the Stripe budget's request classes",
	"code":        "HTTP status codes",
	"direction":   "upgrade or downgrade",
	"door":        "the token-protected doors (api, ops)",
	"goroutine":   "the service's named background goroutines",
	"job":         "billing jobs (remind, collect)",
	"kind":        "incident kinds; billing trigger kinds (income, balance)",
	"method":      "HTTP methods of registered routes",
	"operation":   "DynamoDB operations the service calls",
	"outcome":     "a fixed set of outcomes per family",
	"reason":      "a fixed set of reasons per family",
	"result":      "a fixed set of results per family",
	"route":       "registered route patterns, never raw paths",
	"severity":    "health event severities (critical, non_critical, unknown: folded by ThinHealth)",
	"source":      "delivery sources (webhook, eventbridge, poller, replay)",
	"stage":       "record write stages",
	"state":       "incident states",
	"table":       "the service's tables",
	"topic":       "outbox topics",
}

// collectorLabels maps each prometheus constructor to the position of its
// label names argument.
var collectorLabels = map[string]int{
	"NewCounterVec":   1,
	"NewGaugeVec":     1,
	"NewHistogramVec": 1,
	"NewSummaryVec":   1,
	"NewDesc":         2,
}

// TestNoMetricFamilyHasAnUnboundedLabel reads every collector the module
// declares (outside tests) and checks its label names against
// boundedLabels, so that a stripe_account (or any other id) label cannot
// come back. Labels must be written as a literal []string so that this test
// can read them.
func TestNoMetricFamilyHasAnUnboundedLabel(t *testing.T) {
	root := moduleRoot(t)
	fset := token.NewFileSet()
	seen := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "vendor" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pkg, ok := sel.X.(*ast.Ident)
			if !ok || pkg.Name != "prometheus" {
				return true
			}
			at, ok := collectorLabels[sel.Sel.Name]
			if !ok || len(call.Args) <= at {
				return true
			}
			seen++
			where := fset.Position(call.Pos()).String()
			arg := call.Args[at]
			if id, ok := arg.(*ast.Ident); ok && id.Name == "nil" {
				return true
			}
			lit, ok := arg.(*ast.CompositeLit)
			if !assert.True(t, ok, "%s: label names not a literal []string", where) {
				return true
			}
			for _, e := range lit.Elts {
				bl, ok := e.(*ast.BasicLit)
				if !assert.True(t, ok && bl.Kind == token.STRING, "%s: label name not a string literal", where) {
					continue
				}
				name, err := strconv.Unquote(bl.Value)
				require.NoError(t, err)
				_, bounded := boundedLabels[name]
				assert.True(t, bounded, "%s: label %q is not a known bounded label (an id per account, customer or event makes unbounded series)", where, name)
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, seen, 20, "the walk found the service's collectors")
}

// moduleRoot is the directory of go.mod above the test's directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, parent, dir, "no go.mod above the test")
		dir = parent
	}
}
