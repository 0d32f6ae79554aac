// Package depcheck holds no code: its test checks the import rules of
// docs/design.md §2 on the real import graph (`go list -deps`), so that `make test`
// fails when a package reaches what it must not.
package depcheck

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/stripe-payments/stripe-payments"

// storage is every package that holds or drives a store: the drivers, and
// ours that import them.
var storage = []string{
	"github.com/jackc/pgx",
	"github.com/aws/aws-sdk-go-v2/service/dynamodb",
	module + "/internal/events",
	module + "/internal/postgres",
	module + "/internal/ledger",
	module + "/internal/tracking",
	module + "/internal/billing",
	module + "/internal/outbox",
	module + "/internal/recordq",
	module + "/internal/lock",
	module + "/internal/dynamo",
	module + "/internal/ops",
	module + "/internal/opsdata",
}

// consoleNever is what the operator console must not import itself: it
// views and asks through the services' and stores' methods, it holds no
// database pool and runs no SQL (docs/architecture.md).
var consoleNever = []string{"github.com/jackc/pgx", "database/sql", "github.com/aws/aws-sdk-go-v2",
	module + "/internal/dynamo", module + "/internal/pgtx", module + "/internal/postgres", module + "/internal/billing/store"}

var rules = []struct {
	pkg, why string
	never    []string // import path prefixes, reached directly or not
}{
	{"webhook", "the endpoint hands events to the handler's interface (stripeevent.Handler), never to a store (docs/design.md §2)",
		append([]string{module + "/internal/handler", module + "/internal/app"}, storage...)},
	{"internal/eventbridge", "the EventBridge intake hands events to its Ingester interface, as the webhook does, never to a store",
		append([]string{module + "/internal/handler", module + "/internal/app", module + "/webhook"}, storage...)},
	{"internal/stripeevent", "the event vocabulary is a leaf: anything may import it",
		append([]string{module + "/internal/handler", module + "/webhook", module + "/poller"}, storage...)},
	{"internal/stripeid", "the id check is a leaf", []string{module + "/"}},
	{"internal/apperr", "the error vocabulary is a leaf that every layer returns, actions and the outbox included: no package of " +
		"the module and no net/http (its status mapping is numbers)", []string{module + "/", "net/http"}},
	{"internal/metrics", "metrics observes the handler through the handler's own interfaces; it never imports it",
		[]string{module + "/internal/handler"}},
	{"internal/actions", "causing an effect only enqueues it; HTTP delivery is package dispatch",
		[]string{"net/http", module + "/internal/dispatch"}},
	{"internal/tracking", "the state machines enqueue actions, they never deliver them",
		[]string{module + "/internal/dispatch"}},
	{"internal/tracking", "the state machines run in the transaction the ledger's caller opens and get the ledger's answers " +
		"through FlowsConfig.Processed: they never claim events, open a pool or migrate (docs/architecture.md)",
		[]string{module + "/internal/ledger", module + "/internal/postgres"}},
	{"internal/postgres", "the pool and the migrations sit under every store: they import no package of the service, " +
		"only sql/ (the embedded migrations)",
		[]string{module + "/internal/", module + "/webhook", module + "/poller", module + "/cmd"}},
	{"internal/ledger", "the ledger is a store the handler, recordq and the poller use: it knows no state machine, " +
		"no effect and none of its callers",
		[]string{module + "/internal/tracking", module + "/internal/outbox", module + "/internal/handler", module + "/internal/recordq",
			module + "/internal/app", module + "/webhook", module + "/poller"}},
	{"internal/recordq", "the write-behind claims events through the ledger (ledger.ClaimBatch), never through the state machines",
		[]string{module + "/internal/tracking"}},
	{"internal/outbox", "the outbox sits under the state machines (they enqueue into it) and knows no ledger",
		[]string{module + "/internal/tracking", module + "/internal/ledger"}},
	{"internal/config", "settings are a leaf: components (the handler, billing) read their defaults from it",
		append([]string{module + "/internal/handler", module + "/internal/app"}, storage...)},
	{"internal/ops", "the console and the internal API sit side by side over the same services; the console never goes through the API",
		[]string{module + "/internal/api"}},
	{"internal/billing", "the billing core never reaches its test clocks: package internal/billing/testclock drives it " +
		"through its exported surface (DailyOn: Remind, Collect), never the other way (docs/architecture.md)",
		[]string{module + "/internal/billing/testclock"}},
	{"cmd/stripe-payments", "the local Stripe (cmd/stripe-local) and the tests' fake are development tools, never in the service's binary (docs/design.md §3)",
		[]string{module + "/internal/localstripe", module + "/internal/stripetest"}},
}

// billingDrivers are what the billing core and each of its parts
// (billingParts) must not import itself.
var billingDrivers = []string{"github.com/jackc/pgx", "github.com/aws/aws-sdk-go-v2", "github.com/stripe/stripe-go/v76/client",
	module + "/internal/dynamo", module + "/internal/outbox", module + "/internal/pgtx"}

const billingDriversWhy = "the billing core holds the model and the rules over its own interfaces (internal/billing/model); " +
	"the drivers are its implementations' business (internal/billing/store, stripecharge, notify, feedqueue), wired in by internal/app"

// directRules name what a package must not import itself (it may still
// reach it through a package it uses: the billing core reaches DynamoDB
// through the generic lease lock, and Postgres through internal/actions,
// whose Action type sits beside its enqueue).
var directRules = []struct {
	pkg, why string
	never    []string // import path prefixes
}{
	{"internal/billing", billingDriversWhy, billingDrivers},
	{"internal/ops", "the console only views and asks: no database driver, no pool, no store internals; the tables it " +
		"shows are read through their owners (opsdata, outbox, tracking, thin, recordq)", consoleNever},
}

// TestDirectImportRules fails when a package imports what it must not.
func TestDirectImportRules(t *testing.T) {
	for _, r := range directRules {
		t.Run(r.pkg, func(t *testing.T) {
			for _, v := range violations(t, r.pkg, false, r.never) {
				t.Errorf("%s imports %s: %s", r.pkg, v, r.why)
			}
		})
	}
}

// TestImportRules fails when a package reaches (directly or through others)
// a package it must not.
func TestImportRules(t *testing.T) {
	for _, r := range rules {
		t.Run(r.pkg, func(t *testing.T) {
			for _, v := range violations(t, r.pkg, true, r.never) {
				t.Errorf("%s imports %s: %s", r.pkg, v, r.why)
			}
		})
	}
}

// violations lists what pkg imports (transitive: reaches) among never's
// import path prefixes.
func violations(t *testing.T, pkg string, transitive bool, never []string) []string {
	t.Helper()
	args := []string{"list", "-f", `{{join .Imports "\n"}}`, module + "/" + pkg}
	if transitive {
		args = []string{"list", "-deps", "-f", "{{.ImportPath}}", module + "/" + pkg}
	}
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", pkg, err, out)
	}
	imports := strings.Fields(string(out))
	if len(imports) == 0 {
		t.Fatalf("go list %s listed no imports", pkg)
	}
	var bad []string
	for _, imp := range imports {
		if imp != module+"/"+pkg && forbidden(imp, never) {
			bad = append(bad, imp)
		}
	}
	return bad
}
