package api

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
)

func TestBearerAuth(t *testing.T) {
	const secret = "s3cret-internal-token"
	auth := BearerAuth(secret, nil, nil)
	for _, tc := range []struct {
		header string
		ok     bool
	}{
		{"Bearer " + secret, true},
		{"bearer " + secret, true}, // the scheme is case-insensitive (RFC 7235)
		{"Bearer  " + secret + " ", true},
		{"", false},
		{"Bearer", false},
		{"Bearer ", false},
		{secret, false},
		{"Basic " + secret, false},
		{"Bearer " + secret[:len(secret)-1], false}, // a prefix
		{"Bearer " + secret + "x", false},           // an extension
		{"Bearer " + secret + secret, false},
		{"Bearer S3CRET-INTERNAL-TOKEN", false}, // the token itself is case-sensitive
		{"Bearer " + secret[:10] + "\x00" + secret[11:], false},
	} {
		e := echo.New()
		req := httptest.NewRequest(http.MethodGet, "/internal/v1/events", nil)
		if tc.header != "" {
			req.Header.Set("Authorization", tc.header)
		}
		c := e.NewContext(req, httptest.NewRecorder())
		called := false
		err := auth(func(echo.Context) error { called = true; return nil })(c)
		if tc.ok {
			assert.NoError(t, err, "%q", tc.header)
			assert.True(t, called, "%q", tc.header)
			continue
		}
		assert.False(t, called, "%q let through", tc.header)
		require.Error(t, err, "%q", tc.header)
		assert.Equal(t, apperr.CodeUnauthorized, apperr.From(err).Code)
	}
}

// TestBearerAuthComparesInConstantTime guards the comparison itself: a
// timing measurement would be flaky, so the test reads auth.go and requires
// that the token is compared with crypto/subtle over digests of a fixed
// length (content and length both hidden), and never with ==, != or a
// strings/bytes comparison, which return at the first differing byte.
func TestBearerAuthComparesInConstantTime(t *testing.T) {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "auth.go", nil, 0)
	require.NoError(t, err)
	var fn *ast.FuncDecl
	for _, d := range file.Decls {
		if f, ok := d.(*ast.FuncDecl); ok && f.Name.Name == "BearerAuth" {
			fn = f
		}
	}
	require.NotNil(t, fn, "BearerAuth not found in auth.go")
	var constantTime, digests int
	ast.Inspect(fn, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok {
				pkg, _ := sel.X.(*ast.Ident)
				switch {
				case pkg != nil && pkg.Name == "subtle" && sel.Sel.Name == "ConstantTimeCompare":
					constantTime++
				case pkg != nil && pkg.Name == "sha256" && sel.Sel.Name == "Sum256":
					digests++
				case pkg != nil && (pkg.Name == "strings" || pkg.Name == "bytes") &&
					(sel.Sel.Name == "Compare" || sel.Sel.Name == "Equal" || sel.Sel.Name == "EqualFold") && mentionsToken(n):
					t.Errorf("%s: the token is compared with %s.%s, which is not constant-time", fset.Position(n.Pos()), pkg.Name, sel.Sel.Name)
				}
			}
		case *ast.BinaryExpr:
			if (n.Op == token.EQL || n.Op == token.NEQ) && (mentionsToken(n.X) || mentionsToken(n.Y)) {
				t.Errorf("%s: the token is compared with %s, which is not constant-time", fset.Position(n.Pos()), n.Op)
			}
		}
		return true
	})
	assert.Equal(t, 1, constantTime, "one subtle.ConstantTimeCompare")
	assert.Equal(t, 2, digests, "both sides hashed to a fixed length first")
}

// mentionsToken reports whether n refers to the configured or the presented
// token (the identifiers BearerAuth uses for them).
func mentionsToken(n ast.Node) bool {
	found := false
	ast.Inspect(n, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && (id.Name == "token" || id.Name == "got") {
			found = true
		}
		return true
	})
	return found
}
