// Package deploycheck_test holds the compute in terraform/ to the binary it
// runs (docs/design.md §10 "On AWS"): what the binary requires outside
// development mode is set in the task definition, its secrets only from
// Secrets Manager; every queue it reads has its queue, redrive policy and
// grant; the balancers' ports and health checks are its listeners' and
// routes; every scheduled job is a command the binary runs; every
// dead-letter queue has an alarm. Each check is shown to fail on a copy of
// the Terraform with one mistake in it.
package deploycheck_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zclconf/go-cty/cty"

	"github.com/stripe-payments/stripe-payments/internal/apptest"
	"github.com/stripe-payments/stripe-payments/internal/config"
)

func jsonUnmarshal(s string, out any) error { return json.Unmarshal([]byte(s), out) }

// contractSecrets are the settings that are secrets (docs/design.md §3 and
// §10): never plain environment. ACTIONS_SECRET only with ACTIONS_URL.
var contractSecrets = []string{"STRIPE_WEBHOOK_SECRET", "STRIPE_API_KEY", "INTERNAL_API_TOKEN", "ACTIONS_SECRET", "DATABASE_URL"}

// secretValues stand in for the secrets' values when the task's
// environment is loaded by the binary's configuration: valid production
// values, none of them a development default.
var secretValues = map[string]string{
	"STRIPE_WEBHOOK_SECRET": "whsec_FAKE_deploycheck_not_a_real_secret",
	"STRIPE_API_KEY":        "sk_test_FAKE_deploycheck_not_a_real_key",
	"INTERNAL_API_TOKEN":    "FAKE-deploycheck-token-not-real-0123456789",
	"ACTIONS_SECRET":        "FAKE-deploycheck-actions-secret-not-real",
	"DATABASE_URL":          "postgres://stripe_payments:pw@db.internal.example:5432/stripe_payments?sslmode=verify-full",
}

// code is what the binary says about itself, read once.
type code struct {
	reads        []string // every variable the configuration reads
	publicRoutes []string // "METHOD /path" of the public listener
	adminRoutes  []string // and of the admin one
	drain        time.Duration
	binary       string // the built binary
}

var (
	codeOnce  sync.Once
	codeFacts code
	codeErr   error
	binaryDir string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binaryDir != "" {
		_ = os.RemoveAll(binaryDir)
	}
	os.Exit(code)
}

// theCode reads the variables the configuration reads, the routes of the
// real program's two listeners (built by apptest on the local stack), its
// shutdown drain, and builds the binary.
func theCode(t *testing.T) code {
	t.Helper()
	codeOnce.Do(func() {
		var c code
		seen := map[string]bool{}
		_, _ = config.Load(func(k string) (string, bool) { seen[k] = true; return "", false })
		for k := range seen {
			c.reads = append(c.reads, k)
		}
		sort.Strings(c.reads)

		a := apptest.New(t, apptest.Options{})
		routes := func(e *echo.Echo) []string {
			var out []string
			for _, r := range e.Routes() {
				out = append(out, r.Method+" "+r.Path)
			}
			return out
		}
		c.publicRoutes, c.adminRoutes = routes(a.Server.Echo), routes(a.Admin.Echo)
		c.drain = a.Config.ShutdownTimeout

		binaryDir, codeErr = os.MkdirTemp("", "deploycheck-")
		if codeErr != nil {
			return
		}
		c.binary = filepath.Join(binaryDir, "stripe-payments")
		build := exec.Command("go", "build", "-o", c.binary, "./cmd/stripe-payments")
		build.Dir = "../.."
		if out, err := build.CombinedOutput(); err != nil {
			codeErr = fmt.Errorf("go build: %w\n%s", err, out)
			return
		}
		codeFacts = c
	})
	require.NoError(t, codeErr)
	require.NotEmpty(t, codeFacts.binary, "the code's facts were read (see the first test's failure)")
	return codeFacts
}

// vars are the variables an operator passes (those without defaults) and
// the optional parts turned on: the EventBridge intake, the billing
// triggers queue, ACTIONS_URL, SES.
func vars(full bool) map[string]cty.Value {
	v := map[string]cty.Value{
		"region":                  cty.StringVal(testRegion),
		"vpc_id":                  cty.StringVal("vpc-0a1b2c3d4e5f60718"),
		"public_subnet_ids":       cty.ListVal([]cty.Value{cty.StringVal("subnet-pub-a"), cty.StringVal("subnet-pub-b")}),
		"private_subnet_ids":      cty.ListVal([]cty.Value{cty.StringVal("subnet-priv-a"), cty.StringVal("subnet-priv-b")}),
		"certificate_arn":         cty.StringVal("arn:aws:acm:eu-west-1:111122223333:certificate/webhooks"),
		"admin_ingress_cidrs":     cty.ListVal([]cty.Value{cty.StringVal("10.8.0.0/16")}),
		"image":                   cty.StringVal("111122223333.dkr.ecr.eu-west-1.amazonaws.com/stripe-payments@sha256:0f"),
		"stripe_platform_account": cty.StringVal("acct_1PlatformTest"),
	}
	if full {
		v["stripe_event_source_name"] = cty.StringVal("aws.partner/stripe.com/ed_test_61RM8ltWcTW4mbsxf16RJyfa2xSQLHJJh1sxm7H0KVT6")
		v["platform_event_bus_name"] = cty.StringVal("platform-bus")
		v["actions_url"] = cty.StringVal("https://actions.internal.example/stripe-payments")
		v["ses_identity_arn"] = cty.StringVal("arn:aws:ses:eu-west-1:111122223333:identity/example.com")
		v["ses_from_address"] = cty.StringVal("billing@example.com")
		v["ses_configuration_set"] = cty.StringVal("reminders")
	}
	return v
}

// container is the service's container definition (the fields checked).
type container struct {
	Name         string   `json:"name"`
	Command      []string `json:"command"`
	StopTimeout  int      `json:"stopTimeout"`
	PortMappings []struct {
		ContainerPort int `json:"containerPort"`
	} `json:"portMappings"`
	Environment []struct{ Name, Value string } `json:"environment"`
	Secrets     []struct {
		Name      string `json:"name"`
		ValueFrom string `json:"valueFrom"`
	} `json:"secrets"`
	HealthCheck struct {
		Command []string `json:"command"`
	} `json:"healthCheck"`
	LogConfiguration struct {
		LogDriver string            `json:"logDriver"`
		Options   map[string]string `json:"options"`
	} `json:"logConfiguration"`
}

func taskContainer(t *testing.T, m *module) (instance, container) {
	t.Helper()
	td, ok := m.resource("aws_ecs_task_definition", "service")
	require.True(t, ok, "terraform has the service's task definition")
	var cs []container
	td.json("container_definitions", &cs)
	require.Len(t, cs, 1, "one container")
	return td, cs[0]
}

// plainEnv is the container's environment.
func plainEnv(c container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Environment {
		env[e.Name] = e.Value
	}
	return env
}

// refersTo is the resource address a placeholder ARN, id or URL names
// ("aws_sqs_queue.eventbridge[0]"); "" for anything else.
func refersTo(v string) string {
	for _, p := range []string{"arn:", "id:", "suffix:"} {
		if strings.HasPrefix(v, p) && strings.HasPrefix(v[len(p):], "aws_") {
			return strings.TrimSuffix(v[len(p):], ":family")
		}
	}
	return ""
}

// queueByURL maps each queue's URL to its address.
func queueByURL(m *module) map[string]instance {
	out := map[string]instance{}
	for _, q := range m.instances("aws_sqs_queue") {
		out[fmt.Sprintf("https://sqs.%s.amazonaws.com/%s/%s", testRegion, testAccount, q.str("name"))] = q
	}
	return out
}

// check is one rule the Terraform must keep; it returns what breaks it.
type check func(t *testing.T, m *module, c code) []string

// checkRequiredSettings: the binary's own configuration, outside
// development mode, accepts the task's environment with its secrets; and
// names which of those settings it requires (each one removed fails).
func checkRequiredSettings(t *testing.T, m *module, c code) []string {
	_, ctr := taskContainer(t, m)
	env := plainEnv(ctr)
	for _, s := range ctr.Secrets {
		v, ok := secretValues[s.Name]
		if !ok {
			v = "secret-value-of-" + s.Name
		}
		env[s.Name] = v
	}
	load := func(env map[string]string) error {
		_, err := config.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		return err
	}
	if err := load(env); err != nil {
		return []string{"the binary refuses the task's environment outside development mode: " + err.Error()}
	}
	var required []string
	for k := range env {
		without := map[string]string{}
		for k2, v := range env {
			if k2 != k {
				without[k2] = v
			}
		}
		if load(without) != nil {
			required = append(required, k)
		}
	}
	sort.Strings(required)
	t.Logf("settings the binary requires of this task (outside development mode): %v", required)
	return nil
}

// checkSecrets: every contract secret the task uses comes from a Secrets
// Manager secret of this root, never plain; the execution role may read
// exactly those secrets.
func checkSecrets(t *testing.T, m *module, c code) []string {
	var problems []string
	_, ctr := taskContainer(t, m)
	env := plainEnv(ctr)
	secrets := map[string]string{}
	for _, s := range ctr.Secrets {
		secrets[s.Name] = s.ValueFrom
	}
	for _, name := range contractSecrets {
		if _, ok := env[name]; ok {
			problems = append(problems, name+" is plain environment: a secret comes from Secrets Manager")
		}
		needed := name != "ACTIONS_SECRET" || env["ACTIONS_URL"] != ""
		if _, ok := secrets[name]; needed && !ok {
			problems = append(problems, name+" is not among the task's secrets")
		}
	}
	var arns []string
	for name, from := range secrets {
		if !strings.HasPrefix(refersTo(from), "aws_secretsmanager_secret.") {
			problems = append(problems, fmt.Sprintf("%s comes from %q, not a Secrets Manager secret of terraform/", name, from))
		}
		arns = append(arns, from)
	}
	sort.Strings(arns)

	td, _ := taskContainer(t, m)
	execRole := refersTo(td.str("execution_role_arn"))
	var reads []string
	for _, p := range m.instances("aws_iam_role_policy") {
		if !m.names(p.str("role"), execRole) {
			continue
		}
		for _, st := range policyJSON(t, p.str("policy")) {
			if slices.Contains(st.Action, "secretsmanager:GetSecretValue") || slices.Contains(st.Action, "secretsmanager:*") {
				reads = append(reads, st.Resource...)
			}
		}
	}
	sort.Strings(reads)
	if !slices.Equal(reads, arns) {
		problems = append(problems, fmt.Sprintf("the execution role reads secrets %v; the task's are %v", reads, arns))
	}
	return problems
}

// statementJSON is one statement of a policy written with jsonencode.
type statementJSON struct {
	Sid       string
	Effect    string
	Action    stringList
	Resource  stringList
	Condition map[string]map[string]any
}

// stringList is IAM's "a string or a list of strings".
type stringList []string

func (s *stringList) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = []string{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("neither a string nor a list of strings")
	}
	*s = many
	return nil
}

func policyJSON(t *testing.T, doc string) []statementJSON {
	t.Helper()
	var p struct{ Statement []statementJSON }
	require.NoError(t, json.Unmarshal([]byte(doc), &p), doc)
	return p.Statement
}

// checkQueues: every *_QUEUE_URL variable the binary reads is set to a
// queue of this root that redrives to a dead-letter queue, and the
// service policy (the task role's) lets the service receive and delete
// its messages.
func checkQueues(t *testing.T, m *module, c code) []string {
	var problems []string
	_, ctr := taskContainer(t, m)
	env := plainEnv(ctr)
	queues := queueByURL(m)
	var grants []string
	for _, st := range m.policyStatements("service") {
		for _, a := range st.strs("actions") {
			for _, r := range st.strs("resources") {
				grants = append(grants, a+" "+r)
			}
		}
	}
	td, _ := taskContainer(t, m)
	taskRole := refersTo(td.str("task_role_arn"))
	attached := false
	for _, a := range m.instances("aws_iam_role_policy_attachment") {
		if m.names(a.str("role"), taskRole) && refersTo(a.str("policy_arn")) == "aws_iam_policy.service" {
			attached = true
		}
	}
	if !attached {
		problems = append(problems, "the task role does not carry the service policy")
	}
	n := 0
	for _, name := range c.reads {
		if !strings.HasSuffix(name, "_QUEUE_URL") {
			continue
		}
		n++
		url, ok := env[name]
		if !ok {
			problems = append(problems, name+" (read by the binary) is not set in the task definition")
			continue
		}
		q, ok := queues[url]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s=%s is no queue of terraform/", name, url))
			continue
		}
		if !q.has("redrive_policy") {
			problems = append(problems, q.addr+" ("+name+") has no redrive policy")
		} else {
			var rp struct{ DeadLetterTargetArn string }
			q.json("redrive_policy", &rp)
			dlq := refersTo(rp.DeadLetterTargetArn)
			if !strings.HasPrefix(dlq, "aws_sqs_queue.") || dlq == q.addr {
				problems = append(problems, fmt.Sprintf("%s (%s) redrives to %q, not a dead-letter queue of terraform/", q.addr, name, rp.DeadLetterTargetArn))
			}
		}
		arn := "arn:" + q.addr
		for _, action := range []string{"sqs:ReceiveMessage", "sqs:DeleteMessage"} {
			if !slices.Contains(grants, action+" "+arn) {
				problems = append(problems, fmt.Sprintf("the service policy does not grant %s on %s (%s)", action, q.addr, name))
			}
		}
	}
	if n == 0 {
		problems = append(problems, "the binary reads no *_QUEUE_URL variable: the check reads the wrong configuration")
	}
	return problems
}

// listenPort is the port of a 0.0.0.0:<port> listen address.
func listenPort(addr string) (int, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	if host != "0.0.0.0" {
		return 0, fmt.Errorf("%s: a task listens on 0.0.0.0 (its own network namespace)", addr)
	}
	return strconv.Atoi(port)
}

// checkListeners: the task's two listen addresses are the ports the
// container maps, the service registers and the target groups use; the
// health checks are GET routes of the right listener (/healthz public,
// /readyz admin); the public balancer forwards only the webhook's route
// and answers 404 to the rest; each task port admits only its balancer.
func checkListeners(t *testing.T, m *module, c code) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	_, ctr := taskContainer(t, m)
	env := plainEnv(ctr)
	ports := map[string]int{}
	for side, name := range map[string]string{"public": "LISTEN_ADDR", "admin": "ADMIN_LISTEN_ADDR"} {
		p, err := listenPort(env[name])
		if err != nil {
			bad("%s=%q: %v", name, env[name], err)
			continue
		}
		ports[side] = p
	}
	if len(problems) > 0 {
		return problems
	}
	mapped := map[int]bool{}
	for _, pm := range ctr.PortMappings {
		mapped[pm.ContainerPort] = true
	}
	for side, p := range ports {
		if !mapped[p] {
			bad("the container does not map the %s port %d", side, p)
		}
	}

	svc, ok := m.resource("aws_ecs_service", "serve")
	if !ok {
		return append(problems, "terraform has no serve service")
	}
	registered := map[string]int{} // target group address -> container port
	for _, lb := range svc.blocks("load_balancer") {
		if lb.str("container_name") != ctr.Name {
			bad("the service registers container %s, not %s", lb.str("container_name"), ctr.Name)
		}
		registered[refersTo(lb.str("target_group_arn"))] = int(lb.num("container_port"))
	}
	routes := map[string][]string{"public": c.publicRoutes, "admin": c.adminRoutes}
	wantHealth := map[string]string{"public": "/healthz", "admin": "/readyz"}
	for side, tgName := range map[string]string{"public": "public", "admin": "admin"} {
		tg, ok := m.resource("aws_lb_target_group", tgName)
		if !ok {
			bad("no %s target group", side)
			continue
		}
		if got := int(tg.num("port")); got != ports[side] {
			bad("%s: port %d, the %s listener is on %d", tg.addr, got, side, ports[side])
		}
		if got := registered[tg.addr]; got != ports[side] {
			bad("the service registers container port %d in %s, the %s listener is on %d", got, tg.addr, side, ports[side])
		}
		hc := tg.block("health_check")
		path := hc.str("path")
		if !slices.Contains(routes[side], "GET "+path) {
			bad("%s: health check %s is no GET route of the %s listener", tg.addr, path, side)
		}
		if path != wantHealth[side] {
			bad("%s: health check %s, want %s", tg.addr, path, wantHealth[side])
		}
		if p := hc.str("port"); p != "" && p != "traffic-port" && p != strconv.Itoa(ports[side]) {
			bad("%s: health check on port %s", tg.addr, p)
		}
	}

	// The public listener: 404 by default, one rule forwarding POST of
	// exactly the webhook's path; the internal one forwards to the admin
	// target group.
	pub, ok := m.resource("aws_lb_listener", "public")
	if ok {
		da := pub.block("default_action")
		if da.str("type") != "fixed-response" || da.block("fixed_response").str("status_code") != "404" {
			bad("%s: the default action must be a fixed 404", pub.addr)
		}
	} else {
		bad("no public listener")
	}
	rules := 0
	for _, r := range m.instances("aws_lb_listener_rule") {
		if refersTo(r.str("listener_arn")) != pub.addr {
			continue
		}
		rules++
		var paths, methods []string
		for _, cond := range r.blocks("condition") {
			for _, pp := range cond.blocks("path_pattern") {
				paths = append(paths, pp.strs("values")...)
			}
			for _, hm := range cond.blocks("http_request_method") {
				methods = append(methods, hm.strs("values")...)
			}
			for _, b := range cond.body.Blocks {
				if b.Type != "path_pattern" && b.Type != "http_request_method" {
					bad("%s: a %s condition (only path and method are checked)", r.addr, b.Type)
				}
			}
		}
		if len(paths) != 1 || len(methods) != 1 || !slices.Contains(c.publicRoutes, methods[0]+" "+paths[0]) || strings.ContainsAny(paths[0], "*?") {
			bad("%s forwards %v %v: only the webhook's route (a POST route of the public listener) may reach the service", r.addr, methods, paths)
		}
		action := r.block("action")
		if action.str("type") != "forward" || refersTo(action.str("target_group_arn")) != "aws_lb_target_group.public" {
			bad("%s: must forward to the public target group", r.addr)
		}
	}
	if rules != 1 {
		bad("the public listener has %d rules; one forwards the webhook", rules)
	}
	if adm, ok := m.resource("aws_lb_listener", "admin"); ok {
		da := adm.block("default_action")
		if da.str("type") != "forward" || refersTo(da.str("target_group_arn")) != "aws_lb_target_group.admin" {
			bad("%s: must forward to the admin target group", adm.addr)
		}
	}

	// Security groups: the service's group admits the public port from the
	// public balancer's group and the admin port from the internal one's,
	// nothing else.
	lbGroup := map[string]string{}
	for side, name := range map[string]string{"public": "public", "admin": "admin"} {
		lb, ok := m.resource("aws_lb", name)
		if !ok {
			bad("no %s balancer", side)
			continue
		}
		sgs := lb.strs("security_groups")
		if len(sgs) != 1 {
			bad("%s: one security group", lb.addr)
			continue
		}
		lbGroup[side] = refersTo(sgs[0])
	}
	svcGroups := svc.block("network_configuration").strs("security_groups")
	if len(svcGroups) != 1 {
		return append(problems, "the service has one security group")
	}
	svcGroup := refersTo(svcGroups[0])
	admitted := map[string]string{}
	for _, r := range m.instances("aws_vpc_security_group_ingress_rule") {
		if refersTo(r.str("security_group_id")) != svcGroup {
			continue
		}
		from, to := r.num("from_port"), r.num("to_port")
		src := refersTo(r.str("referenced_security_group_id"))
		if from != to || src == "" || r.str("cidr_ipv4") != "" || r.str("cidr_ipv6") != "" || r.str("prefix_list_id") != "" {
			bad("%s: the service admits %d-%d from %q: only one port from one balancer's group", r.addr, from, to, r.str("cidr_ipv4")+src)
			continue
		}
		admitted[strconv.Itoa(int(from))+" "+src] = r.addr
	}
	want := map[string]bool{}
	for side, p := range ports {
		want[strconv.Itoa(p)+" "+lbGroup[side]] = true
		if _, ok := admitted[strconv.Itoa(p)+" "+lbGroup[side]]; !ok {
			bad("the service does not admit the %s port %d from the %s balancer", side, p, side)
		}
	}
	for k, addr := range admitted {
		if !want[k] {
			bad("%s admits %s: each port only from its balancer", addr, k)
		}
	}
	for _, r := range m.instances("aws_security_group_rule") {
		if refersTo(r.str("security_group_id")) == svcGroup {
			bad("%s: use aws_vpc_security_group_ingress_rule (checked) for the service's group", r.addr)
		}
	}
	return problems
}

// checkService: rolling deploys at full capacity, at least two tasks, a
// stop timeout longer than the binary's drain, the binary's own health
// check, logs in CloudWatch with a retention.
func checkService(t *testing.T, m *module, c code) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	svc, ok := m.resource("aws_ecs_service", "serve")
	if !ok {
		return []string{"terraform has no serve service"}
	}
	if got := svc.num("deployment_minimum_healthy_percent"); got != 100 {
		bad("deployment_minimum_healthy_percent %d: deploys keep full capacity (100)", got)
	}
	if got := svc.num("deployment_maximum_percent"); got != 200 {
		bad("deployment_maximum_percent %d: a deploy starts the new tasks beside the old (200)", got)
	}
	if got := svc.num("desired_count"); got < 2 {
		bad("desired_count %d: at least two tasks", got)
	}
	if n := len(svc.block("network_configuration").strs("subnets")); n < 2 {
		bad("%d subnets: tasks spread over at least two zones", n)
	}
	if svc.str("launch_type") != "FARGATE" {
		bad("launch_type %q", svc.str("launch_type"))
	}
	_, ctr := taskContainer(t, m)
	if !slices.Equal(ctr.Command, []string{"serve"}) {
		bad("the service's command is %v", ctr.Command)
	}
	if time.Duration(ctr.StopTimeout)*time.Second <= c.drain {
		bad("stopTimeout %ds: not longer than serve's drain (%s)", ctr.StopTimeout, c.drain)
	}
	if ctr.StopTimeout > 120 {
		bad("stopTimeout %ds: Fargate allows at most 120", ctr.StopTimeout)
	}
	if !slices.Equal(ctr.HealthCheck.Command, []string{"CMD", "/stripe-payments", "healthcheck", "--live"}) {
		bad("health check %v: the image has no shell, so the binary checks itself, and only liveness (a failing container check makes ECS replace the task; a store outage must not replace them all)", ctr.HealthCheck.Command)
	}
	if ctr.LogConfiguration.LogDriver != "awslogs" {
		bad("log driver %q", ctr.LogConfiguration.LogDriver)
	}
	group := ctr.LogConfiguration.Options["awslogs-group"]
	found := false
	for _, g := range m.instances("aws_cloudwatch_log_group") {
		if g.str("name") == group {
			found = true
			if g.num("retention_in_days") <= 0 {
				bad("%s has no retention", g.addr)
			}
		}
	}
	if !found {
		bad("the log group %q is not a log group of terraform/", group)
	}
	return problems
}

// checkJobs: every scheduled job runs the service's task definition with
// a command the binary accepts (it gets as far as its configuration), in
// the billing time zone, by a role that may run exactly that.
func checkJobs(t *testing.T, m *module, c code) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	td, ctr := taskContainer(t, m)
	schedules := m.instances("aws_scheduler_schedule")
	var jobs []string
	for _, s := range schedules {
		// The binary's billing date is "tomorrow in UTC" (billing remind|collect).
		if tz := s.str("schedule_expression_timezone"); tz != "UTC" {
			bad("%s: time zone %q, the billing date is UTC's", s.addr, tz)
		}
		target := s.block("target")
		if refersTo(target.str("arn")) != "aws_ecs_cluster.main" {
			bad("%s: targets %s, not the cluster", s.addr, target.str("arn"))
		}
		ecs := target.block("ecs_parameters")
		if refersTo(ecs.str("task_definition_arn")) != td.addr {
			bad("%s: runs %s, not the service's task definition", s.addr, ecs.str("task_definition_arn"))
		}
		var input struct {
			ContainerOverrides []struct {
				Name    string
				Command []string
			} `json:"containerOverrides"`
		}
		target.json("input", &input)
		if len(input.ContainerOverrides) != 1 || input.ContainerOverrides[0].Name != ctr.Name {
			bad("%s: overrides %+v, not the container %s", s.addr, input.ContainerOverrides, ctr.Name)
			continue
		}
		cmd := input.ContainerOverrides[0].Command
		jobs = append(jobs, strings.Join(cmd, " "))
		if msg := runsAsJob(c.binary, cmd); msg != "" {
			bad("%s: %v %s", s.addr, cmd, msg)
		}
		if len(target.blocks("dead_letter_config")) != 1 {
			bad("%s: a run Scheduler cannot start must reach a dead-letter queue", s.addr)
		}
		role := refersTo(target.str("role_arn"))
		var runs, passes []string
		for _, p := range m.instances("aws_iam_role_policy") {
			if !m.names(p.str("role"), role) {
				continue
			}
			for _, st := range policyJSON(t, p.str("policy")) {
				if slices.Contains(st.Action, "ecs:RunTask") {
					runs = append(runs, st.Resource...)
				}
				if slices.Contains(st.Action, "iam:PassRole") {
					passes = append(passes, st.Resource...)
				}
			}
		}
		if !slices.ContainsFunc(runs, func(r string) bool { return refersTo(r) == td.addr }) || slices.Contains(runs, "*") {
			bad("%s: its role may run %v, not exactly the service's task definition", s.addr, runs)
		}
		sort.Strings(passes)
		wantPass := []string{td.str("execution_role_arn"), td.str("task_role_arn")}
		sort.Strings(wantPass)
		if !slices.Equal(passes, wantPass) {
			bad("%s: its role passes %v, want the task's roles %v", s.addr, passes, wantPass)
		}
	}
	sort.Strings(jobs)
	for _, want := range []string{"billing collect", "billing remind", "poll"} {
		if !slices.ContainsFunc(jobs, func(j string) bool { return j == want || strings.HasPrefix(j, want+" ") }) {
			bad("no schedule runs %q (docs/design.md §10)", want)
		}
	}
	return problems
}

// runsAsJob runs the binary with a job's command and no settings: a
// command it has gets as far as its configuration (and stops there,
// naming what is missing); "" when it does.
func runsAsJob(binary string, command []string) string {
	cmd := exec.Command(binary, command...)
	cmd.Env = []string{} // outside development mode, nothing set
	out, err := cmd.CombinedOutput()
	if err == nil {
		return "ran with no settings at all (expected it to stop at its configuration)"
	}
	if !strings.Contains(string(out), "missing required settings") {
		return "is not a command the binary runs: " + strings.TrimSpace(string(out))
	}
	return ""
}

// checkAlarms: every dead-letter queue (a redrive policy's target, or an
// EventBridge or Scheduler target's) has an alarm on a visible message;
// every queue an alarm on its oldest message's age; every balancer on its
// targets' and its own 5xx.
func checkAlarms(t *testing.T, m *module, c code) []string {
	var problems []string
	type alarm struct{ namespace, metric, dimension string }
	var alarms []alarm
	for _, a := range m.instances("aws_cloudwatch_metric_alarm") {
		var dims map[string]string
		a.goValue("dimensions", &dims)
		for _, d := range dims {
			alarms = append(alarms, alarm{a.str("namespace"), a.str("metric_name"), d})
		}
		if a.str("metric_name") == "ApproximateNumberOfMessagesVisible" &&
			(a.num("threshold") != 0 || a.str("comparison_operator") != "GreaterThanThreshold") {
			problems = append(problems, a.addr+": a dead-letter alarm fires on the first message (> 0)")
		}
	}
	has := func(a alarm) bool { return slices.Contains(alarms, a) }

	queues := map[string]instance{}
	for _, q := range m.instances("aws_sqs_queue") {
		queues[q.addr] = q
	}
	dlqs := map[string]bool{}
	for _, q := range queues {
		if q.has("redrive_policy") {
			var rp struct{ DeadLetterTargetArn string }
			q.json("redrive_policy", &rp)
			dlqs[refersTo(rp.DeadLetterTargetArn)] = true
		}
	}
	for _, typ := range []string{"aws_cloudwatch_event_target", "aws_scheduler_schedule"} {
		for _, r := range m.instances(typ) {
			holders := []instance{r}
			holders = append(holders, r.blocks("target")...)
			for _, h := range holders {
				for _, d := range h.blocks("dead_letter_config") {
					dlqs[refersTo(d.str("arn"))] = true
				}
			}
		}
	}
	if len(dlqs) == 0 {
		problems = append(problems, "no dead-letter queue found: the check reads the wrong resources")
	}
	for addr := range dlqs {
		q, ok := queues[addr]
		if !ok {
			problems = append(problems, fmt.Sprintf("dead-letter queue %q is no queue of terraform/", addr))
			continue
		}
		if !has(alarm{"AWS/SQS", "ApproximateNumberOfMessagesVisible", q.str("name")}) {
			problems = append(problems, "dead-letter queue "+addr+" has no alarm on its messages")
		}
	}
	for addr, q := range queues {
		if !has(alarm{"AWS/SQS", "ApproximateAgeOfOldestMessage", q.str("name")}) {
			problems = append(problems, "queue "+addr+" has no alarm on its oldest message's age")
		}
	}
	for _, lb := range m.instances("aws_lb") {
		for _, metric := range []string{"HTTPCode_Target_5XX_Count", "HTTPCode_ELB_5XX_Count"} {
			if !has(alarm{"AWS/ApplicationELB", metric, lb.computed("arn_suffix")}) {
				problems = append(problems, lb.addr+" has no alarm on "+metric)
			}
		}
	}
	sort.Strings(problems)
	return problems
}

var checks = map[string]check{
	"required settings": checkRequiredSettings,
	"secrets":           checkSecrets,
	"queues":            checkQueues,
	"listeners":         checkListeners,
	"service":           checkService,
	"jobs":              checkJobs,
	"alarms":            checkAlarms,
}

// TestTerraformComputeMatchesTheBinary: the Terraform as committed keeps
// every rule, with the optional parts off and on.
func TestTerraformComputeMatchesTheBinary(t *testing.T) {
	c := theCode(t)
	t.Logf("variables the configuration reads: %v", c.reads)
	for _, full := range []bool{false, true} {
		m := loadModule(t, terraformDir, vars(full))
		for name, check := range checks {
			if name == "queues" && !full {
				continue // without the EventBridge intake no queue variable is set
			}
			t.Run(fmt.Sprintf("%s/optional parts on=%v", name, full), func(t *testing.T) {
				assert.Empty(t, check(t, m, c))
			})
		}
	}
}

// TestTerraformComputeChecksFail: each check finds a mistake made in a
// copy of the Terraform.
func TestTerraformComputeChecksFail(t *testing.T) {
	c := theCode(t)
	for _, tc := range []struct {
		name, check, file, from, to, want string
	}{
		{"a secret dropped from the secrets", "secrets", "ecs.tf",
			`["STRIPE_WEBHOOK_SECRET", "STRIPE_API_KEY", "INTERNAL_API_TOKEN", "DATABASE_URL"]`,
			`["STRIPE_WEBHOOK_SECRET", "INTERNAL_API_TOKEN", "DATABASE_URL"]`, "STRIPE_API_KEY is not among the task's secrets"},
		{"a secret also set plainly", "secrets", "ecs.tf",
			`AWS_REGION              = var.region`, `AWS_REGION = var.region
      DATABASE_URL = "postgres://u:p@db/x"`, "DATABASE_URL is plain environment"},
		{"the execution role reads every secret", "secrets", "ecs.tf",
			`Resource = [for k in sort(local.secret_names) : aws_secretsmanager_secret.service[k].arn]`, `Resource = ["*"]`,
			"the execution role reads secrets [*]"},
		{"a required setting missing", "required settings", "ecs.tf",
			`STRIPE_PLATFORM_ACCOUNT = var.stripe_platform_account`, ``, "STRIPE_PLATFORM_ACCOUNT"},
		{"a secret missing", "required settings", "ecs.tf",
			`["STRIPE_WEBHOOK_SECRET", "STRIPE_API_KEY", "INTERNAL_API_TOKEN", "DATABASE_URL"]`,
			`["STRIPE_WEBHOOK_SECRET", "STRIPE_API_KEY", "DATABASE_URL"]`, "INTERNAL_API_TOKEN"},
		{"the intake's queue without redrive", "queues", "eventbridge.tf",
			`  redrive_policy = jsonencode({
    deadLetterTargetArn = aws_sqs_queue.eventbridge_dlq[0].arn
    maxReceiveCount     = var.eventbridge_max_receive_count
  })
`, ``, "has no redrive policy"},
		{"the intake's queue not granted", "queues", "iam.tf",
			`for_each = aws_sqs_queue.eventbridge[*].arn`, `for_each = []`, "does not grant sqs:ReceiveMessage"},
		{"the queue variable not set", "queues", "ecs.tf",
			`{ EVENTBRIDGE_QUEUE_URL = aws_sqs_queue.eventbridge[0].url }`, `{}`, "EVENTBRIDGE_QUEUE_URL (read by the binary) is not set"},
		{"the task role without the service policy", "queues", "ecs.tf",
			`policy_arn = aws_iam_policy.service.arn`, `policy_arn = aws_iam_policy.admin.arn`, "does not carry the service policy"},
		{"an edit that breaks no rule", "listeners", "ecs.tf",
			`admin_port  = 8081`, `admin_port  = 8081
  other_port  = 9090`, ""},
		{"LISTEN_ADDR on loopback", "listeners", "ecs.tf",
			`LISTEN_ADDR             = "0.0.0.0:${local.public_port}"`, `LISTEN_ADDR = "127.0.0.1:${local.public_port}"`, "a task listens on 0.0.0.0"},
		{"a target group on another port", "listeners", "balancers.tf",
			`port        = local.public_port`, `port        = 8082`, "port 8082, the public listener is on 8080"},
		{"a health check on a path the listener lacks", "listeners", "balancers.tf",
			`path                = "/readyz"`, `path                = "/ready"`, "health check /ready is no GET route of the admin listener"},
		{"readiness on the public side", "listeners", "balancers.tf",
			`path                = "/healthz"`, `path                = "/readyz"`, "health check /readyz is no GET route of the public listener"},
		{"the public balancer forwards more than the webhook", "listeners", "balancers.tf",
			`values = ["/webhooks/stripe"]`, `values = ["/*"]`, "only the webhook's route"},
		{"the public balancer forwards GET", "listeners", "balancers.tf",
			`values = ["POST"]`, `values = ["GET"]`, "only the webhook's route"},
		{"the public balancer's default forwards", "listeners", "balancers.tf",
			`status_code  = "404"`, `status_code  = "200"`, "the default action must be a fixed 404"},
		{"the admin port admitted from the public balancer", "listeners", "balancers.tf",
			`  referenced_security_group_id = aws_security_group.admin_lb.id
}`, `  referenced_security_group_id = aws_security_group.public_lb.id
}`, "does not admit the admin port 8081 from the admin balancer"},
		{"the admin port open to a network", "listeners", "balancers.tf",
			`  from_port                    = local.admin_port
  to_port                      = local.admin_port
  referenced_security_group_id = aws_security_group.admin_lb.id`, `  from_port                    = local.admin_port
  to_port                      = local.admin_port
  cidr_ipv4                    = "10.0.0.0/8"`, "only one port from one balancer's group"},
		{"deploys below full capacity", "service", "ecs.tf",
			`deployment_minimum_healthy_percent = 100`, `deployment_minimum_healthy_percent = 50`, "deployment_minimum_healthy_percent 50"},
		{"a stop timeout within the drain", "service", "ecs.tf",
			`stop_timeout = 60`, `stop_timeout = 20`, "not longer than serve's drain"},
		{"a health check needing a shell", "service", "ecs.tf",
			`command     = ["CMD", "/stripe-payments", "healthcheck", "--live"]`, `command     = ["CMD-SHELL", "curl -f localhost:8081/readyz"]`, "the binary checks itself"},
		{"a job the binary does not have", "jobs", "scheduler.tf",
			`command  = ["billing", "collect"]`, `command  = ["billing", "charge"]`, "is not a command the binary runs"},
		{"a job flag the binary does not have", "jobs", "scheduler.tf",
			`command  = ["poll", "--in-process"]`, `command  = ["poll", "--in-proc"]`, "is not a command the binary runs"},
		{"a schedule in another time zone", "jobs", "scheduler.tf",
			`billing_time_zone = "UTC"`, `billing_time_zone = "Europe/Paris"`, `time zone "Europe/Paris"`},
		{"the scheduler may run any task", "jobs", "scheduler.tf",
			`Resource = [aws_ecs_task_definition.service.arn_without_revision, "${aws_ecs_task_definition.service.arn_without_revision}:*"]`,
			`Resource = ["*"]`, "not exactly the service's task definition"},
		{"a dead-letter queue without its alarm", "alarms", "alarms.tf",
			`{ scheduler_dlq = { name = aws_sqs_queue.scheduler_dlq.name, dead_letter = true } },`, `{},`,
			"dead-letter queue aws_sqs_queue.scheduler_dlq has no alarm on its messages"},
		{"the billing queue's dead-letter queue without its alarm", "alarms", "alarms.tf",
			`billing_dlq = { name = aws_sqs_queue.billing_dlq.name, dead_letter = true }`, ``,
			"dead-letter queue aws_sqs_queue.billing_dlq has no alarm on its messages"},
		{"the billing queue without its redrive", "queues", "billingqueue.tf",
			`  redrive_policy = jsonencode({
    deadLetterTargetArn = aws_sqs_queue.billing_dlq.arn
    maxReceiveCount     = var.billing_queue_max_receive_count
  })
`, ``, "has no redrive policy"},
		{"BILLING_QUEUE_URL not set", "queues", "ecs.tf",
			`      BILLING_QUEUE_URL          = aws_sqs_queue.billing.url
`, ``, "BILLING_QUEUE_URL (read by the binary) is not set"},
		{"the intake's dead-letter queue without its alarm", "alarms", "alarms.tf",
			`eventbridge_dlq = { name = aws_sqs_queue.eventbridge_dlq[0].name, dead_letter = true }`,
			`eventbridge_dlq = { name = aws_sqs_queue.eventbridge_dlq[0].name, dead_letter = false }`,
			`dead-letter queue aws_sqs_queue.eventbridge_dlq[0] has no alarm on its messages`},
		{"a balancer without its 5xx alarm", "alarms", "alarms.tf",
			`elb    = "HTTPCode_ELB_5XX_Count"`, ``, "has no alarm on HTTPCode_ELB_5XX_Count"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := loadModule(t, editedCopy(t, edit{tc.file, tc.from, tc.to}), vars(true))
			problems := checks[tc.check](t, m, c)
			if tc.want == "" {
				assert.Empty(t, problems, "an edit that keeps the rules passes")
				return
			}
			require.NotEmpty(t, problems, "the %s check misses: %s", tc.check, tc.name)
			assert.Contains(t, strings.Join(problems, "\n"), tc.want)
		})
	}
}

// TestTerraformComputeSecretMovedToPlainEnvironment: a secret taken out of
// the secrets and set plainly instead is caught, although the binary would
// accept the configuration.
func TestTerraformComputeSecretMovedToPlainEnvironment(t *testing.T) {
	c := theCode(t)
	dir := editedCopy(t,
		edit{"ecs.tf", `["STRIPE_WEBHOOK_SECRET", "STRIPE_API_KEY", "INTERNAL_API_TOKEN", "DATABASE_URL"]`,
			`["STRIPE_WEBHOOK_SECRET", "INTERNAL_API_TOKEN", "DATABASE_URL"]`},
		edit{"ecs.tf", `AWS_REGION              = var.region`, `AWS_REGION = var.region
      STRIPE_API_KEY = "sk_test_FAKE_deploycheck_not_a_real_key"`},
	)
	m := loadModule(t, dir, vars(true))
	assert.Empty(t, checkRequiredSettings(t, m, c), "the binary itself would run with it")
	assert.ElementsMatch(t, []string{
		"STRIPE_API_KEY is plain environment: a secret comes from Secrets Manager",
		"STRIPE_API_KEY is not among the task's secrets",
	}, checkSecrets(t, m, c))
}
