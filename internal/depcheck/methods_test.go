package depcheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// maxMethods is the most methods one type of the billing core may declare:
// a type with more holds more than one concept, and a reader following one
// of them wades through the others (docs/architecture.md "The billing core").
// Methods an embedded field promotes are not counted: the type that declares
// them is.
const maxMethods = 30

// TestNoBillingTypeHasMoreThan30Methods counts the methods each type
// declares in the production files of every package under internal/billing
// (the package itself included), so that a new method on a type already at
// the limit fails here rather than growing the type unnoticed.
func TestNoBillingTypeHasMoreThan30Methods(t *testing.T) {
	counts := map[string]int{}
	packages := 0
	err := filepath.WalkDir(filepath.Join("..", "billing"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		pkg, err := packageMethods(path, readGoFiles(t, path))
		if err != nil {
			return err
		}
		packages++
		dir := "internal/" + filepath.ToSlash(strings.TrimPrefix(path, ".."+string(filepath.Separator)))
		for typ, n := range pkg {
			counts[dir+"."+typ] = n
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk internal/billing: %v", err)
	}
	// A walk that found next to nothing (a moved directory) proves nothing.
	if packages < len(billingParts) || len(counts) == 0 {
		t.Fatalf("walked %d packages under internal/billing, %d types with methods", packages, len(counts))
	}
	for _, typ := range overLimit(counts) {
		t.Errorf("%s declares %d methods, more than %d: split it by concept into smaller types (embedding keeps its callers compiling)",
			typ, counts[typ], maxMethods)
	}
	largest := ""
	for typ, n := range counts {
		if largest == "" || n > counts[largest] || (n == counts[largest] && typ < largest) {
			largest = typ
		}
	}
	t.Logf("%d types; the largest, %s, declares %d methods", len(counts), largest, counts[largest])
}

// TestMethodLimitCaught proves the count can fail, and counts what it must:
// a type over the limit is reported, methods declared in several files add
// up, pointer, value and generic receivers all count, test files and
// promoted methods do not.
func TestMethodLimitCaught(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		want  map[string]int
		over  []string
	}{
		{
			name:  "31 methods on one type",
			files: map[string]string{"big.go": synthetic("Big", 0, 31, true)},
			want:  map[string]int{"Big": 31},
			over:  []string{"Big"},
		},
		{
			name:  "30 methods is the limit",
			files: map[string]string{"big.go": synthetic("Big", 0, 30, false)},
			want:  map[string]int{"Big": 30},
		},
		{
			name: "methods in two files add up",
			files: map[string]string{
				"a.go": synthetic("Big", 0, 16, true),
				"b.go": "package p\n" + methods("Big", 16, 31, false),
			},
			want: map[string]int{"Big": 31},
			over: []string{"Big"},
		},
		{
			name: "test files do not count",
			files: map[string]string{
				"big.go":      synthetic("Big", 0, 30, true),
				"big_test.go": "package p\n" + methods("Big", 30, 40, true),
			},
			want: map[string]int{"Big": 30},
		},
		{
			name: "generic receivers count",
			files: map[string]string{"page.go": "package p\ntype Page[T any] struct{}\n" +
				"func (p *Page[T]) A() {}\nfunc (p Page[T]) B() {}\n"},
			want: map[string]int{"Page": 2},
		},
		{
			name: "promoted methods count for the type that declares them",
			files: map[string]string{"split.go": synthetic("Part", 0, 20, true) +
				methods("Other", 20, 40, true) + "type Other struct{}\ntype Whole struct{ *Part; Other }\n"},
			want: map[string]int{"Part": 20, "Other": 20},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := packageMethods("p", c.files)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("counts = %v, want %v", got, c.want)
			}
			if over := overLimit(got); fmt.Sprint(over) != fmt.Sprint(c.over) {
				t.Errorf("over the limit: %v, want %v", over, c.over)
			}
		})
	}
}

// synthetic is a file of package p declaring type name with methods
// M<from>..M<to-1>.
func synthetic(name string, from, to int, pointer bool) string {
	return "package p\ntype " + name + " struct{}\n" + methods(name, from, to, pointer)
}

func methods(name string, from, to int, pointer bool) string {
	recv := name
	if pointer {
		recv = "*" + name
	}
	var b strings.Builder
	for i := from; i < to; i++ {
		fmt.Fprintf(&b, "func (x %s) M%d() {}\n", recv, i)
	}
	return b.String()
}

// readGoFiles reads the .go files of dir (not its subdirectories).
func readGoFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
	files := map[string]string{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") {
			continue
		}
		src, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatalf("read %s: %v", e.Name(), err)
		}
		files[e.Name()] = string(src)
	}
	return files
}

// packageMethods counts the methods each type declares in the production
// files (not _test.go) of one package directory, by type name.
func packageMethods(dir string, files map[string]string) (map[string]int, error) {
	counts := map[string]int{}
	fset := token.NewFileSet()
	for name, src := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), src, parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", name, err)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) == 0 {
				continue
			}
			if typ := receiverType(fn.Recv.List[0].Type); typ != "" {
				counts[typ]++
			}
		}
	}
	return counts, nil
}

// receiverType is the name of a receiver's type: T, *T, T[P] or *T[P, Q].
func receiverType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// overLimit lists, sorted, the types of counts with more than maxMethods.
func overLimit(counts map[string]int) []string {
	var over []string
	for typ, n := range counts {
		if n > maxMethods {
			over = append(over, typ)
		}
	}
	sort.Strings(over)
	return over
}
