package apperr_test

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
)

// TestStatus pins every code's HTTP status (docs/api.md, Errors): clients
// branch on these, so a change here is a change of the API.
func TestStatus(t *testing.T) {
	tests := []struct {
		code apperr.Code
		want int
	}{
		{apperr.CodeMissingSignature, http.StatusBadRequest},
		{apperr.CodeInvalidSignature, http.StatusBadRequest},
		{apperr.CodeTimestampTolerance, http.StatusBadRequest},
		{apperr.CodeInvalidEvent, http.StatusBadRequest},
		{apperr.CodeInvalidParameter, http.StatusBadRequest},
		{apperr.CodePayloadTooLarge, http.StatusRequestEntityTooLarge},
		{apperr.CodeUnauthorized, http.StatusUnauthorized},
		{apperr.CodeTooManyRequests, http.StatusTooManyRequests},
		{apperr.CodeLivemode, http.StatusForbidden},
		{apperr.CodeNotFound, http.StatusNotFound},
		{apperr.CodeConflict, http.StatusConflict},
		{apperr.CodeMethodNotAllowed, http.StatusMethodNotAllowed},
		{apperr.CodePaymentFailed, http.StatusPaymentRequired},
		{apperr.CodeUpstream, http.StatusBadGateway},
		{apperr.CodeUnavailable, http.StatusServiceUnavailable},
		{apperr.CodeInternal, http.StatusInternalServerError},
		{apperr.Code("no_such_code"), http.StatusInternalServerError},
	}
	for _, tc := range tests {
		if got := apperr.Status(tc.code); got != tc.want {
			t.Errorf("Status(%q) = %d, want %d", tc.code, got, tc.want)
		}
	}
}

// A package's own sentinel (apperr.New at package level), as billing keeps
// ErrLocked and ErrConflict apart.
var (
	errLocked   = apperr.New(apperr.CodeConflict, "the account is being billed")
	errConflict = apperr.New(apperr.CodeConflict, "changed concurrently")
)

// TestIs: the kinds match every error of their code, wrapped or not; a
// package's sentinel matches only itself, so branches on it keep their
// meaning.
func TestIs(t *testing.T) {
	notFound := apperr.New(apperr.CodeNotFound, "event %s not found", "evt_1")
	tests := []struct {
		name   string
		err    error
		target error
		want   bool
	}{
		{"kind matches its code", notFound, apperr.ErrNotFound, true},
		{"kind matches through wrapping", fmt.Errorf("get: %w", notFound), apperr.ErrNotFound, true},
		{"kind matches a wrapped cause's code", apperr.Wrap(errors.New("x"), apperr.CodeInvalidParameter, "bad"), apperr.ErrInvalid, true},
		{"kind matches itself", fmt.Errorf("x: %w", apperr.ErrNotFound), apperr.ErrNotFound, true},
		{"kind does not match another code", notFound, apperr.ErrConflict, false},
		{"conflict kind matches a package sentinel", fmt.Errorf("a: %w", errLocked), apperr.ErrConflict, true},
		{"sentinel matches itself wrapped", fmt.Errorf("a: %w", errLocked), errLocked, true},
		{"sentinel with a detailed message", apperr.Wrap(errLocked, apperr.CodeConflict, "account %s", "acct_1"), errLocked, true},
		{"sentinel does not match a sibling of its code", fmt.Errorf("a: %w", errConflict), errLocked, false},
		{"sentinel does not match its kind", apperr.ErrConflict, errLocked, false},
		{"sentinel does not match a fresh error of its code", apperr.New(apperr.CodeConflict, "the account is being billed"), errLocked, false},
		{"plain error matches no kind", errors.New("not found"), apperr.ErrNotFound, false},
		{"nil matches nothing", nil, apperr.ErrNotFound, false},
	}
	for _, tc := range tests {
		if got := errors.Is(tc.err, tc.target); got != tc.want {
			t.Errorf("%s: errors.Is = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestEnsureAndCodeOf(t *testing.T) {
	cause := errors.New("connection refused")
	coded := fmt.Errorf("read: %w", apperr.New(apperr.CodeNotFound, "incident inc_1 not found"))
	tests := []struct {
		name    string
		err     error
		code    apperr.Code // of Ensure(err, CodeUnavailable, ...)
		message string
	}{
		{"an uncoded error takes the default", cause, apperr.CodeUnavailable, "store is unavailable"},
		{"a coded error keeps its code and message", coded, apperr.CodeNotFound, "incident inc_1 not found"},
		{"a sentinel keeps its own", fmt.Errorf("a: %w", errLocked), apperr.CodeConflict, "the account is being billed"},
	}
	for _, tc := range tests {
		got := apperr.Ensure(tc.err, apperr.CodeUnavailable, "store is unavailable")
		if !errors.Is(got, tc.err) {
			t.Errorf("%s: Ensure lost the cause: %v", tc.name, got)
		}
		if c := apperr.CodeOf(got); c != tc.code {
			t.Errorf("%s: code %q, want %q", tc.name, c, tc.code)
		}
		if m := apperr.From(got).Message; m != tc.message {
			t.Errorf("%s: message %q, want %q", tc.name, m, tc.message)
		}
	}
	if apperr.Ensure(nil, apperr.CodeUnavailable, "x") != nil {
		t.Error("Ensure(nil) is not nil")
	}
	if c := apperr.CodeOf(cause); c != "" {
		t.Errorf("CodeOf(uncoded) = %q, want empty", c)
	}
}

// TestOneMapping: the internal API never chooses an error status itself; it
// returns errors and the server's error handler answers apperr.Status of
// their code (internal/httpserver). A 4xx or 5xx http.Status constant in
// internal/api's code is a second mapping.
func TestOneMapping(t *testing.T) {
	dir := filepath.Join("..", "api")
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s (%v): the test would check nothing", dir, err)
	}
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		ast.Inspect(file, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok {
				checkCall(t, filepath.Base(f), call)
				return true
			}
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pkg, ok := sel.X.(*ast.Ident)
			if !ok || pkg.Name != "http" || !strings.HasPrefix(sel.Sel.Name, "Status") {
				return true
			}
			if status, known := statusValue(sel.Sel.Name); known && status >= 400 {
				t.Errorf("%s: http.%s: answer errors with an apperr code (apperr.Status maps it)", filepath.Base(f), sel.Sel.Name)
			}
			return true
		})
	}
	if checked == 0 {
		t.Fatal("no production files in internal/api")
	}
}

// checkCall flags an error status chosen past the names: a number of 400
// or more handed to a call (c.JSON(404, ...)), or an error built for echo's
// status (echo.NewHTTPError) or written by hand (http.Error, WriteHeader).
func checkCall(t *testing.T, file string, call *ast.CallExpr) {
	t.Helper()
	if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
		pkg, _ := sel.X.(*ast.Ident)
		if sel.Sel.Name == "NewHTTPError" || sel.Sel.Name == "WriteHeader" || pkg != nil && pkg.Name == "http" && sel.Sel.Name == "Error" {
			t.Errorf("%s: %s: answer errors with an apperr code (apperr.Status maps it)", file, sel.Sel.Name)
		}
	}
	for _, arg := range call.Args {
		lit, ok := arg.(*ast.BasicLit)
		if !ok || lit.Kind != token.INT {
			continue
		}
		if n, err := strconv.Atoi(lit.Value); err == nil && n >= 400 && n < 600 {
			t.Errorf("%s: status %d in a call: answer errors with an apperr code (apperr.Status maps it)", file, n)
		}
	}
}

// statusValue resolves an http.StatusXxx name the test may meet.
func statusValue(name string) (int, bool) {
	for code := 100; code < 600; code++ {
		text := http.StatusText(code)
		if text == "" {
			continue
		}
		if "Status"+strings.NewReplacer(" ", "", "-", "", "'", "").Replace(text) == name {
			return code, true
		}
	}
	// A name whose text differs from it (StatusTeapot, ...) counts as an
	// error status so that someone looks at it; http.StatusText is no status.
	return 600, name != "StatusText"
}

// Invalid is the one constructor of bad-input refusals: an ErrInvalid with
// its message, answered 400 invalid_parameter.
func TestInvalid(t *testing.T) {
	err := apperr.Invalid("amount: %d is not 1 to %d", 0, 99)
	if !errors.Is(err, apperr.ErrInvalid) || errors.Is(err, apperr.ErrNotFound) {
		t.Fatalf("%v: want ErrInvalid only", err)
	}
	if got := apperr.CodeOf(err); got != apperr.CodeInvalidParameter || apperr.Status(got) != http.StatusBadRequest {
		t.Fatalf("code %q status %d: want invalid_parameter 400", got, apperr.Status(got))
	}
	if got := apperr.From(err).Message; got != "amount: 0 is not 1 to 99" {
		t.Fatalf("message %q", got)
	}
}
