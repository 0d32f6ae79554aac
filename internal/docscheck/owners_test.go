package docscheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var (
	backticked = regexp.MustCompile("`([^`]+)`")
	createdIn  = regexp.MustCompile(`(?i)CREATE TABLE (?:IF NOT EXISTS )?([a-z_]+)`)
	// namedPackage is a package in the table, and whether "(through" follows.
	namedPackage = regexp.MustCompile("`(internal/[a-z/]+)`( \\(through)?")
)

// tableOwners reads the ownership table: each Postgres table's owner
// package and the packages allowed to name it besides (its readers).
func tableOwners(t *testing.T, root string) (owner map[string]string, readers map[string][]string) {
	t.Helper()
	page, err := os.ReadFile(filepath.Join(root, "docs/architecture.md"))
	require.NoError(t, err)
	_, section, found := strings.Cut(string(page), "## Who owns which table")
	require.True(t, found, "docs/architecture.md has no ownership table")
	section, _, _ = strings.Cut(section, "\n## ")
	owner, readers = map[string]string{}, map[string][]string{}
	for _, line := range strings.Split(section, "\n") {
		cols := strings.Split(line, "|")
		if len(cols) < 6 || strings.TrimSpace(cols[2]) != "Postgres" {
			continue
		}
		// A package named "(through ...)" reads through the owner's
		// methods: it may not name the table in SQL of its own.
		pkgs := func(col string) []string {
			var out []string
			for _, m := range namedPackage.FindAllStringSubmatch(col, -1) {
				if m[2] == "" {
					out = append(out, m[1])
				}
			}
			return out
		}
		owners := pkgs(cols[3])
		require.NotEmpty(t, owners, "no owner package in %q", line)
		for _, m := range backticked.FindAllStringSubmatch(cols[1], -1) {
			owner[m[1]] = owners[0]
			readers[m[1]] = pkgs(cols[4])
		}
	}
	return owner, readers
}

// Every Postgres table has one owner package, named in docs/architecture.md,
// and only the owner and the readers named there have SQL that names it:
// a table's reads and deletes are the owner's methods, so its schema can
// change in one package.
func TestEachTableIsNamedOnlyByItsOwnerAndReaders(t *testing.T) {
	root := repoRoot(t)
	owner, readers := tableOwners(t, root)

	migrations, err := filepath.Glob(filepath.Join(root, "sql", "*.sql"))
	require.NoError(t, err)
	var tables, unowned []string
	for _, m := range migrations {
		raw, err := os.ReadFile(m)
		require.NoError(t, err)
		for _, c := range createdIn.FindAllStringSubmatch(string(raw), -1) {
			tables = append(tables, c[1])
			if owner[c[1]] == "" {
				unowned = append(unowned, c[1])
			}
		}
	}
	require.Empty(t, unowned, "tables without an owner in docs/architecture.md's \"Who owns which table\"")

	named := regexp.MustCompile(`(?i)\b(?:FROM|JOIN|INTO|UPDATE|TABLE)\s+(` + strings.Join(tables, "|") + `)\b`)
	var trespass []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(rel)
		seen := map[string]bool{}
		for _, m := range named.FindAllStringSubmatch(string(raw), -1) {
			table := strings.ToLower(m[1])
			if seen[table] || owner[table] == pkg || slices.Contains(readers[table], pkg) {
				continue
			}
			seen[table] = true
			trespass = append(trespass, pkg+" names "+table+" (owner "+owner[table]+")")
		}
		return nil
	})
	require.NoError(t, err)
	sort.Strings(trespass)
	require.Empty(t, trespass, "SQL on a table another package owns: call the owner's method instead, or name the reader in docs/architecture.md")
}
