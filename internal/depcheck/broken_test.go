package depcheck

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRulesFailWhenBroken proves the rules of the split of the Postgres
// packages (docs/architecture.md) can fail: for each, the real package gets
// one more file (a go list overlay; nothing on disk changes) importing what
// the rule forbids, and the rule must name that import in the resulting
// import graph (for a direct rule, among the package's own imports). The
// last cases of each package are imports its rules allow, which must pass.
func TestRulesFailWhenBroken(t *testing.T) {
	cases := []struct {
		pkg, imports string
		caught       bool
	}{
		// The console (internal/ops) only views and asks.
		{"internal/ops", "github.com/jackc/pgx/v5/pgxpool", true},
		{"internal/ops", "github.com/jackc/pgx/v5", true},
		{"internal/ops", "database/sql", true},
		{"internal/ops", module + "/internal/billing/store", true},
		{"internal/ops", module + "/internal/postgres", true},
		{"internal/ops", module + "/internal/api", true},
		{"internal/ops", module + "/internal/opsdata", false},
		{"internal/ops", module + "/internal/ledger", false},
		{"internal/postgres", module + "/internal/tracking", true},
		{"internal/postgres", module + "/internal/pgtx", true},
		{"internal/ledger", module + "/internal/tracking", true},
		{"internal/ledger", module + "/internal/outbox", true},
		{"internal/tracking", module + "/internal/ledger", true},
		{"internal/tracking", module + "/internal/postgres", true},
		{"internal/recordq", module + "/internal/tracking", true},
		{"internal/outbox", module + "/internal/ledger", true},
		// The webhook's rule covers the new stores through storage.
		{"webhook", module + "/internal/ledger", true},
		{"webhook", module + "/internal/postgres", true},
		// Billing importing its test clocks is a cycle too; the graph
		// go list -e still lists shows the rule catching it.
		{"internal/billing", module + "/internal/billing/testclock", true},
		{"internal/ledger", module + "/internal/pgtx", false},
		{"internal/recordq", module + "/internal/ledger", false},
	}
	for _, c := range cases {
		t.Run(c.pkg+" imports "+strings.TrimPrefix(c.imports, module+"/"), func(t *testing.T) {
			caught := false
			for _, check := range []struct {
				direct bool
				rules  []struct {
					pkg, why string
					never    []string
				}
			}{{false, rules}, {true, directRules}} {
				deps := depsWithImport(t, c.pkg, c.imports, check.direct)
				for _, r := range check.rules {
					if r.pkg != c.pkg {
						continue
					}
					for _, dep := range deps {
						if dep != module+"/"+r.pkg && forbidden(dep, r.never) {
							caught = caught || dep == c.imports
						}
					}
				}
			}
			if caught != c.caught {
				t.Errorf("a rule of %s catches an import of %s: %v, want %v", c.pkg, c.imports, caught, c.caught)
			}
		})
	}
}

// forbidden reports whether dep is one of never or below one of them, as
// TestImportRules matches.
func forbidden(dep string, never []string) bool {
	for _, bad := range never {
		if dep == bad || strings.HasPrefix(dep, strings.TrimSuffix(bad, "/")+"/") {
			return true
		}
	}
	return false
}

// depsWithImport is `go list -deps` of pkg (direct: its own imports) with
// one more file in it that imports imp.
func depsWithImport(t *testing.T, pkg, imp string, direct bool) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.Dir}} {{.Name}}", module+"/"+pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", pkg, err, out)
	}
	dir, name, ok := strings.Cut(strings.TrimSpace(string(out)), " ")
	if !ok {
		t.Fatalf("go list %s: %q", pkg, out)
	}
	tmp := t.TempDir()
	src := filepath.Join(tmp, "broken.go")
	if err := os.WriteFile(src, []byte("package "+name+"\n\nimport _ \""+imp+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(dir, "zz_depcheck_broken.go"): src}})
	if err != nil {
		t.Fatal(err)
	}
	overlayFile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o600); err != nil {
		t.Fatal(err)
	}
	// -e: an import that closes a cycle is an error, yet the graph is
	// still listed; whether imp is in it is checked below.
	args := []string{"list", "-e", "-overlay", overlayFile, "-deps", "-f", "{{.ImportPath}}", module + "/" + pkg}
	if direct {
		args = []string{"list", "-e", "-overlay", overlayFile, "-f", `{{join .Imports "\n"}}`, module + "/" + pkg}
	}
	out, err = exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go list %s with an import of %s: %v\n%s", pkg, imp, err, out)
	}
	deps := strings.Fields(string(out))
	found := false
	for _, d := range deps {
		found = found || d == imp
	}
	if !found {
		t.Fatalf("the overlay did not add %s to the graph of %s: %v", imp, pkg, deps)
	}
	return deps
}
