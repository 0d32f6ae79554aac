package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// The image test (docs/operations.md "The image"): `make image`'s script
// builds the image, and podman runs it the way scripts/image.sh does on
// this machine (runc, explicit ulimits, the checkout's storage), on the
// host network, in production mode (no APP_ENV) against the local stack and
// a fake Stripe on loopback that speaks TLS, since outside development
// mode STRIPE_API_BASE must be https:// (the container trusts the fake's
// certificate through SSL_CERT_FILE).
const (
	imageMaxBytes = 40_000_000
	imageReplicas = 3
	imageSenders  = 8
	imageLoadTime = 9 * time.Second // one container is killed a third of the way in
	imageSecret   = "whsec_fake_image_test_secret"
	imageAPIKey   = "sk_test_fake_image_test_key"
	imagePlatform = "acct_1ImagePlatform0000"
	imageMerchant = "acct_1ImageMerchant0000"
	// imageCADir is where the containers find the fake Stripe's certificate.
	imageCADir = "/test-ca"
)

// podmanTool runs scripts/image.sh, which knows how podman runs here.
type podmanTool struct {
	t    *testing.T
	root string
}

// script runs scripts/image.sh with args (and env added to the test's
// environment) and returns its stdout and stderr.
func (p podmanTool) script(timeout time.Duration, env []string, args ...string) (string, string, error) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(p.root, "scripts", "image.sh"), args...)
	cmd.Env = append(os.Environ(), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("scripts/image.sh %s did not finish within %s: %w", strings.Join(args, " "), timeout, ctx.Err())
	}
	return o.String(), e.String(), err
}

// podman runs podman on the checkout's storage; a failure ends the test.
func (p podmanTool) podman(args ...string) string {
	p.t.Helper()
	stdout, stderr, err := p.script(time.Minute, nil, append([]string{"podman"}, args...)...)
	require.NoError(p.t, err, "podman %s\nstdout: %s\nstderr: %s", strings.Join(args, " "), stdout, stderr)
	return strings.TrimSpace(stdout)
}

// run is `podman run` with the machine's runtime and ulimits.
func (p podmanTool) run(args ...string) (string, string, error) {
	p.t.Helper()
	return p.script(time.Minute, nil, append([]string{"run"}, args...)...)
}

// imageContainer is one `serve` container on the host network.
type imageContainer struct {
	name, addr, admin string
}

func (c imageContainer) url() string      { return "http://" + c.addr }
func (c imageContainer) adminURL() string { return "http://" + c.admin }

// TestImage builds the image and runs it: a missing secret refused by name;
// a container serving a purchase through the fake Stripe over TLS, a signed
// webhook recorded and readable through the internal API, a billing
// subscription in a named time zone (the scratch image has no zoneinfo:
// time/tzdata), /ops/ absent on the public port, the HEALTHCHECK passing,
// the process not root; then three containers under 8 concurrent senders,
// one killed with SIGKILL mid-run: every event answered 200 recorded,
// processed and applied exactly once.
func TestImage(t *testing.T) {
	if testing.Short() {
		t.Fatal("this test has no short mode; run it with `make test`")
	}
	t.Parallel()
	began := time.Now()
	for _, tool := range []string{"podman", "runc"} {
		if _, err := exec.LookPath(tool); err != nil {
			if _, err := os.Stat("/usr/sbin/" + tool); err != nil {
				t.Fatalf("%s not found: the image test needs Debian's podman and runc (scripts/test.sh installs them; by hand: apt-get install podman runc)", tool)
			}
		}
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(root, "Dockerfile"))
	p := podmanTool{t: t, root: root}

	// Build, with a tag of its own (removed at the end: the storage is the
	// checkout's .dev/podman, shared with make image). -trimpath and
	// CGO_ENABLED=0 share no build cache with the other tests: the first
	// build on a machine compiles everything (minutes on 2 busy cores).
	tag := randomHex(6)
	image := "localhost/stripe-payments:imagetest-" + tag
	version := "v0.0.0-imagetest-" + tag
	buildStart := time.Now()
	stdout, stderr, err := p.script(8*time.Minute, []string{"IMAGE=" + image, "VERSION=" + version, "IMAGE_CONTEXT=" + t.TempDir()}, "build")
	require.NoError(t, err, "scripts/image.sh build\nstdout: %s\nstderr: %s", stdout, stderr)
	t.Cleanup(func() { _, _, _ = p.script(time.Minute, nil, "podman", "rmi", "-f", image) })
	require.Equal(t, image, lastLines(stdout, 1), "the build prints the image reference last")
	buildTime := time.Since(buildStart)

	size := checkImageConfig(t, p, image, version, root)
	checkImageFiles(t, p, image)

	// version: the stamps of the build.
	head := strings.TrimSpace(gitOutput(t, root, "rev-parse", "HEAD"))
	stdout, stderr, err = p.run("--rm", image, "version")
	require.NoError(t, err, stderr)
	assert.True(t, strings.HasPrefix(stdout, "stripe-payments "+version+" (commit "+head[:12]), "version prints the stamps: %q", stdout)

	// No shell to run anything else with.
	_, stderr, err = p.run("--rm", "--entrypoint", "/bin/sh", image, "-c", "true")
	require.Error(t, err, "the image has no shell")
	assert.Contains(t, stderr, "no such file or directory")

	// The fake Stripe, on TLS; the containers trust its certificate.
	fake := stripetest.NewHandler(stripetest.Options{Key: imageAPIKey})
	tlsStripe := httptest.NewUnstartedServer(fake)
	tlsStripe.StartTLS()
	t.Cleanup(tlsStripe.Close)
	fake.URL = tlsStripe.URL
	caDir := t.TempDir()
	require.NoError(t, os.Chmod(caDir, 0o755)) // the containers' user reads it
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsStripe.Certificate().Raw})
	require.NoError(t, os.WriteFile(filepath.Join(caDir, "stripe-ca.pem"), caPEM, 0o644))

	token := "image-test-token-" + randomHex(16) // production's length and variety
	vars := stackVars(t, fake, map[string]string{
		"STRIPE_WEBHOOK_SECRET":   imageSecret,
		"STRIPE_PLATFORM_ACCOUNT": imagePlatform,
		"INTERNAL_API_TOKEN":      token,
		"LOG_LEVEL":               "info",
		"SSL_CERT_FILE":           imageCADir + "/stripe-ca.pem",
		"AWS_REGION":              os.Getenv("AWS_REGION"),
		"AWS_ACCESS_KEY_ID":       os.Getenv("AWS_ACCESS_KEY_ID"),
		"AWS_SECRET_ACCESS_KEY":   os.Getenv("AWS_SECRET_ACCESS_KEY"),
	})
	require.True(t, strings.HasPrefix(vars["STRIPE_API_BASE"], "https://"), vars["STRIPE_API_BASE"])
	runArgs := func(extra map[string]string) []string {
		env := map[string]string{}
		for k, v := range vars {
			env[k] = v
		}
		for k, v := range extra {
			if v == "" {
				delete(env, k)
			} else {
				env[k] = v
			}
		}
		return []string{"--network", "host", "-v", caDir + ":" + imageCADir + ":ro", "--env-file", envFile(t, env)}
	}

	// A missing secret is refused by name, in production mode.
	_, stderr, err = p.run(append(append([]string{"--rm"}, runArgs(map[string]string{"STRIPE_WEBHOOK_SECRET": ""})...), image)...)
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "serve without STRIPE_WEBHOOK_SECRET must fail: %v\n%s", err, stderr)
	assert.Equal(t, 1, exit.ExitCode(), stderr)
	assert.Contains(t, stderr, "configuration: missing required settings")
	assert.Contains(t, stderr, "STRIPE_WEBHOOK_SECRET")

	stdout, stderr, err = p.run(append(append([]string{"--rm"}, runArgs(nil)...), image, "migrate")...)
	require.NoError(t, err, "migrate in the image\nstdout: %s\nstderr: %s", stdout, stderr)

	// Three serve containers (the image's CMD), each on its own ports.
	var ctrs []imageContainer
	for i := range imageReplicas {
		c := imageContainer{name: fmt.Sprintf("stripe-payments-imagetest-%s-%d", tag, i), addr: freeAddr(t), admin: freeAddr(t)}
		t.Cleanup(func() {
			if t.Failed() {
				out, errOut, _ := p.script(time.Minute, nil, "podman", "logs", "--tail", "30", c.name)
				t.Logf("%s's last log lines:\n%s%s", c.name, out, errOut)
			}
			_, _, _ = p.script(time.Minute, nil, "podman", "rm", "-f", "-t", "0", c.name)
		})
		args := append([]string{"-d", "--name", c.name}, runArgs(map[string]string{"LISTEN_ADDR": c.addr, "ADMIN_LISTEN_ADDR": c.admin})...)
		stdout, stderr, err := p.run(append(args, image)...)
		require.NoError(t, err, "start %s\nstdout: %s\nstderr: %s", c.name, stdout, stderr)
		ctrs = append(ctrs, c)
	}
	client := &http.Client{Timeout: 15 * time.Second}
	for _, c := range ctrs {
		waitFor(t, 30*time.Second, c.name+" to answer /healthz", func() (bool, string) {
			resp, err := client.Get(c.url() + "/healthz")
			if err != nil {
				return false, err.Error() + "; state " + p.podman("inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", c.name)
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, resp.Status
		})
	}
	first := ctrs[0]

	// The image's HEALTHCHECK, as podman runs it, and the subcommand itself.
	p.podman("healthcheck", "run", first.name)
	out := p.podman("exec", first.name, "/stripe-payments", "healthcheck")
	assert.Equal(t, "ok: GET http://"+first.admin+"/readyz: 200", out)
	out = p.podman("exec", first.name, "/stripe-payments", "healthcheck", "--live")
	assert.Equal(t, "ok: GET http://"+first.admin+"/healthz: 200", out)

	// Not root: the container's process, as the kernel sees it.
	pid := p.podman("inspect", "--format", "{{.State.Pid}}", first.name)
	status, err := os.ReadFile("/proc/" + pid + "/status")
	require.NoError(t, err)
	ids := map[string][]string{}
	for _, line := range strings.Split(string(status), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && (k == "Uid" || k == "Gid") {
			ids[k] = strings.Fields(v)
		}
	}
	assert.Equal(t, []string{"65532", "65532", "65532", "65532"}, ids["Uid"], "real, effective, saved and file-system uid")
	assert.Equal(t, []string{"65532", "65532", "65532", "65532"}, ids["Gid"])

	// The console only on the admin port.
	for _, tc := range []struct {
		base string
		want func(int) bool
		what string
	}{
		{first.url(), func(s int) bool { return s == http.StatusNotFound }, "404 on the public port"},
		{first.adminURL(), func(s int) bool { return s != http.StatusNotFound }, "served on the admin port"},
	} {
		resp, err := (&http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Get(tc.base + "/ops/")
		require.NoError(t, err)
		resp.Body.Close()
		assert.True(t, tc.want(resp.StatusCode), "/ops/ %s: got %d", tc.what, resp.StatusCode)
	}

	api := func(c imageContainer, method, path string, body any) (int, map[string]any) {
		t.Helper()
		var raw []byte
		if body != nil {
			raw, _ = json.Marshal(body)
		}
		req, err := http.NewRequest(method, c.adminURL()+path, bytes.NewReader(raw))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		answer, _ := io.ReadAll(resp.Body)
		var m map[string]any
		_ = json.Unmarshal(answer, &m)
		return resp.StatusCode, m
	}

	// A purchase: the container talks to the fake Stripe over TLS; the
	// signed webhook about its PaymentIntent is recorded, processed and
	// readable through the internal API, and fulfils it.
	account := uuid.NewString()
	code, created := api(first, http.MethodPost, "/v1/purchases", map[string]any{"account": account, "stripe_account": imageMerchant,
		"mode": "legacy", "amount": 1500, "currency": "usd"})
	require.Equal(t, http.StatusCreated, code, "purchase: %v", created)
	purchaseID, pi := created["id"].(string), created["payment_intent"].(string)
	require.NotEmpty(t, pi, "purchase: %v", created)
	assert.True(t, slices.ContainsFunc(fake.Requests(), func(r stripetest.Request) bool {
		return r.Method == http.MethodPost && r.Path == "/v1/payment_intents"
	}), "the PaymentIntent was created at the fake Stripe, over TLS")
	fx := fixtures(t, "payment_intent.succeeded", "customer.created")
	eventID, payload := fixtureEvent(fx["payment_intent.succeeded"], imageMerchant, time.Now().Unix(),
		map[string]any{"id": pi, "metadata": map[string]any{"purchase_id": purchaseID, "account": account}, "invoice": nil})
	code, answer, err := postJSON(client, first.url()+"/webhooks/stripe", payload, "Stripe-Signature", stripetest.Sign(payload, imageSecret, time.Now()))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, "%s", answer)
	code, rec := api(first, http.MethodGet, "/internal/v1/events/"+eventID, nil)
	require.Equal(t, http.StatusOK, code, "%v", rec)
	assert.Equal(t, "processed", rec["status"], "%v", rec)
	assert.Equal(t, imageMerchant, rec["stripe_account"], "%v", rec)
	code, got := api(first, http.MethodGet, "/v1/purchases/"+purchaseID, nil)
	require.Equal(t, http.StatusOK, code, "%v", got)
	assert.Equal(t, "fulfilled", got["status"], "%v", got)

	// A billing subscription in New York: refused as an unknown time zone
	// if the binary lacked its own zoneinfo.
	code, sub := api(first, http.MethodPost, "/internal/v1/accounts/image-acct/subscriptions", map[string]any{
		"subscription_id": "sub-image-tz", "sku": "sku-image", "email": "image@example.com", "payment_day": 15, "amount": 1000,
		"currency": "usd", "customer": "cus_imagetz", "payment_method": "pm_imagetz", "stripe_account": imageMerchant,
		"timezone": "America/New_York"})
	require.Equal(t, http.StatusCreated, code, "%v", sub)
	assert.Equal(t, "America/New_York", sub["timezone"], "%v", sub)

	// Three containers, eight senders, one container killed mid-run.
	load := imageLoadRun(t, p, ctrs, fx["customer.created"], client)

	// Every event answered 200 is recorded, processed and applied; the
	// ledger holds each event of the run once and nothing else.
	pool := connect(t, vars["DATABASE_URL"])
	checkAcknowledged(t, pool, vars["EVENTS_TABLE"], append(load.acked, eventID))
	known := map[string]bool{eventID: true}
	for _, id := range load.sent {
		known[id] = true
	}
	ledger := ledgerEventIDs(t, pool)
	seen := map[string]int{}
	for _, id := range ledger {
		seen[id]++
		assert.True(t, known[id], "ledger row for an event the run never sent: %s", id)
		assert.Equal(t, 1, seen[id], "event %s applied twice", id)
	}

	// The survivors stop cleanly on SIGTERM; nothing panicked; no secret
	// in any container's log.
	for i, c := range ctrs {
		if i == load.killed {
			assert.Equal(t, "137", p.podman("inspect", "--format", "{{.State.ExitCode}}", c.name), "SIGKILL's exit status")
		} else {
			p.podman("stop", "-t", "30", c.name)
			assert.Equal(t, "0", p.podman("inspect", "--format", "{{.State.ExitCode}}", c.name), "%s exits 0 on SIGTERM", c.name)
		}
		logs, errLogs, err := p.script(time.Minute, nil, "podman", "logs", c.name)
		require.NoError(t, err)
		for _, bad := range []string{"panic:", "fatal error:", imageSecret, imageAPIKey, token} {
			assert.NotContains(t, logs+errLogs, bad, "%s's log", c.name)
		}
	}
	t.Logf("image: %.1f MB, built in %s; load: %d events sent (%d duplicate deliveries to a second container), %d answered 200 (per container %v), container %d killed at %s; total %s",
		float64(size)/1e6, buildTime.Round(time.Millisecond), len(load.sent), load.duplicates, len(load.acked), load.perContainer,
		load.killed, load.killedAt.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
}

// checkImageConfig checks the image's size, user, entrypoint, command,
// healthcheck and labels; it returns the size.
func checkImageConfig(t *testing.T, p podmanTool, image, version, root string) int64 {
	t.Helper()
	var inspect []struct {
		Size   int64
		Config struct {
			User       string
			Entrypoint []string
			Cmd        []string
			Env        []string
		}
		Labels      map[string]string
		Healthcheck struct {
			Test    []string
			Timeout time.Duration
		}
	}
	require.NoError(t, json.Unmarshal([]byte(p.podman("image", "inspect", image)), &inspect))
	require.Len(t, inspect, 1)
	img := inspect[0]
	assert.LessOrEqual(t, img.Size, int64(imageMaxBytes), "the image is at most 40 MB")
	assert.Equal(t, "65532:65532", img.Config.User)
	assert.Equal(t, []string{"/stripe-payments"}, img.Config.Entrypoint)
	assert.Equal(t, []string{"serve"}, img.Config.Cmd)
	assert.Equal(t, []string{"CMD", "/stripe-payments", "healthcheck"}, img.Healthcheck.Test, "the HEALTHCHECK runs the subcommand (no shell)")
	assert.Greater(t, img.Healthcheck.Timeout, 5*time.Second, "longer than the subcommand's own timeout")
	assert.Equal(t, version, img.Labels["org.opencontainers.image.version"])
	assert.Equal(t, strings.TrimSpace(gitOutput(t, root, "rev-parse", "HEAD")), img.Labels["org.opencontainers.image.revision"])
	assert.Equal(t, "https://github.com/stripe-payments/stripe-payments", img.Labels["org.opencontainers.image.source"])
	for _, kv := range img.Config.Env {
		assert.False(t, strings.HasPrefix(kv, "APP_ENV="), "the image sets no development mode: %s", kv)
	}
	return img.Size
}

// checkImageFiles: the image holds the binary and the build machine's CA
// bundle, and nothing else.
func checkImageFiles(t *testing.T, p podmanTool, image string) {
	t.Helper()
	name := "stripe-payments-imagefiles-" + randomHex(6)
	p.podman("create", "--name", name, image)
	t.Cleanup(func() { _, _, _ = p.script(time.Minute, nil, "podman", "rm", "-f", name) })
	// The container's whole file system, as podman exports it.
	tarPath := filepath.Join(t.TempDir(), "fs.tar")
	p.podman("export", "--output", tarPath, name)
	f, err := os.Open(tarPath)
	require.NoError(t, err)
	defer f.Close()
	var files []string
	var bundle []byte
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		if h.Typeflag == tar.TypeDir {
			continue
		}
		name := strings.TrimPrefix(h.Name, "./")
		files = append(files, name)
		assert.Equal(t, 0, h.Uid, "%s belongs to root: the service's user cannot change it", name)
		assert.Zero(t, h.Mode&0o022, "%s is writable by its owner only", name)
		if name == "etc/ssl/certs/ca-certificates.crt" {
			bundle, err = io.ReadAll(tr)
			require.NoError(t, err)
		}
	}
	slices.Sort(files)
	assert.Equal(t, []string{"etc/ssl/certs/ca-certificates.crt", "stripe-payments"}, files, "no shell, no tools: the binary and the CA bundle")
	want, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, bundle), "the image's CA bundle is the build machine's")
}

// imageLoad is what the load phase did.
type imageLoad struct {
	sent, acked  []string
	duplicates   int64
	perContainer []int64
	killed       int
	killedAt     time.Duration
}

// imageLoadRun sends platform events from imageSenders senders spread over
// the containers (a tenth delivered twice at once, to two containers), and
// kills the second container with SIGKILL a third of the way in. A sender
// whose delivery fails (connection refused, 5xx) tries the next container,
// as Stripe retries, for up to 20 s.
func imageLoadRun(t *testing.T, p podmanTool, ctrs []imageContainer, fixture map[string]any, client *http.Client) imageLoad {
	var (
		mu         sync.Mutex
		out        = imageLoad{perContainer: make([]int64, len(ctrs)), killed: 1}
		duplicates atomic.Int64
		served     = make([]atomic.Int64, len(ctrs))
	)
	deliver := func(payload []byte, start int) bool {
		deadline := time.Now().Add(20 * time.Second)
		for attempt := 0; time.Now().Before(deadline); attempt++ {
			i := (start + attempt) % len(ctrs)
			if attempt > 0 {
				time.Sleep(50 * time.Millisecond)
			}
			code, answer, err := postJSON(client, ctrs[i].url()+"/webhooks/stripe", payload, "Stripe-Signature", stripetest.Sign(payload, imageSecret, time.Now()))
			if err != nil || code >= 500 {
				continue
			}
			if code != http.StatusOK {
				t.Errorf("a valid event was refused by %s: %d %s", ctrs[i].name, code, answer)
				return false
			}
			served[i].Add(1)
			return true
		}
		return false
	}
	stop := runLoad(imageSenders, 20261128, func(rng *rand.Rand, worker, n int) {
		id, payload := fixtureEvent(fixture, "", time.Now().Unix(), map[string]any{"id": fmt.Sprintf("cus_image%02d%06d", worker, n)})
		mu.Lock()
		out.sent = append(out.sent, id)
		mu.Unlock()
		start := rng.IntN(len(ctrs))
		var twice sync.WaitGroup
		var dupOK atomic.Bool
		if rng.IntN(10) == 0 {
			duplicates.Add(1)
			twice.Add(1)
			go func() { defer twice.Done(); dupOK.Store(deliver(payload, start+1)) }()
		}
		ok := deliver(payload, start)
		twice.Wait()
		if ok || dupOK.Load() {
			mu.Lock()
			out.acked = append(out.acked, id)
			mu.Unlock()
		}
	})
	begin := time.Now()
	time.Sleep(imageLoadTime / 3)
	before := served[out.killed].Load()
	p.podman("kill", "-s", "KILL", ctrs[out.killed].name)
	out.killedAt = time.Since(begin)
	time.Sleep(imageLoadTime - out.killedAt)
	stop()
	out.duplicates = duplicates.Load()
	for i := range served {
		out.perContainer[i] = served[i].Load()
	}
	require.Positive(t, before, "the killed container had answered events before the kill")
	for i, n := range out.perContainer {
		if i != out.killed {
			require.Positive(t, n, "container %d answered no event", i)
		}
	}
	require.NotEmpty(t, out.acked)
	return out
}

// envFile writes vars as an --env-file (readable by its owner only: it
// holds the secrets) and returns its path.
func envFile(t *testing.T, vars map[string]string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "env")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(assignments(vars), "\n")+"\n"), 0o600))
	return path
}

func gitOutput(t *testing.T, root string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", root}, args...)...).Output()
	require.NoError(t, err, "git %s", strings.Join(args, " "))
	return string(out)
}
