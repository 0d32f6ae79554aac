package depcheck

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// billingParts are the billing core's parts (docs/architecture.md "The
// billing core"): packages under internal/billing that the package
// internal/billing only wires together.
var billingParts = []string{"model", "settle", "schedule", "env", "outcome", "jobs", "collect", "feed", "lifecycle", "remind", "reads"}

const billingCore = module + "/internal/billing"

// TestBillingPartsImportNoDriver: each part, like the core, works over the
// model's interfaces and imports no driver itself.
func TestBillingPartsImportNoDriver(t *testing.T) {
	for _, part := range billingParts {
		t.Run(part, func(t *testing.T) {
			for _, v := range violations(t, "internal/billing/"+part, false, billingDrivers) {
				t.Errorf("internal/billing/%s imports %s: %s", part, v, billingDriversWhy)
			}
		})
	}
}

// TestNothingUnderBillingImportsTheCore: no package under internal/billing
// reaches the package internal/billing (an import running back up): the
// parts, the store, the charger, the notifier, the feed's queue, batches
// and test clocks depend on the parts they use, and the core wires them.
// Every package go list finds there is checked, so a new one is too.
func TestNothingUnderBillingImportsTheCore(t *testing.T) {
	out, err := exec.Command("go", "list", billingCore+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) < len(billingParts) {
		t.Fatalf("go list listed %d packages under internal/billing: %q", len(pkgs), pkgs)
	}
	for _, pkg := range pkgs {
		if pkg == billingCore {
			continue
		}
		deps, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, deps)
		}
		if slices.Contains(strings.Fields(string(deps)), billingCore) {
			t.Errorf("%s reaches %s: the parts under it never import the package that wires them", pkg, billingCore)
		}
	}
}

// TestBillingCoreImportCaught proves the check above can fail: a part with
// one more file importing the core (a cycle: go list -e still lists the
// graph) has the core among its deps.
func TestBillingCoreImportCaught(t *testing.T) {
	for _, part := range []string{"collect", "store"} {
		deps := depsWithImport(t, "internal/billing/"+part, billingCore, false)
		if !slices.Contains(deps, billingCore) {
			t.Errorf("internal/billing/%s importing the core: not in its deps %q", part, deps)
		}
	}
}
