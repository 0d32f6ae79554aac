package stripetest

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// StripeMockVersion is the stripe-mock the project tests against
// (scripts/test.sh installs it with go install).
const StripeMockVersion = "v0.203.0"

// StripeMockBinary finds stripe-mock: $STRIPE_MOCK_BIN, then PATH, then
// $(go env GOPATH)/bin. A missing binary fails the test: it never skips.
func StripeMockBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("STRIPE_MOCK_BIN"); p != "" {
		return p
	}
	if p, err := exec.LookPath("stripe-mock"); err == nil {
		return p
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
			gopath = strings.TrimSpace(string(out))
		}
	}
	for _, dir := range filepath.SplitList(gopath) {
		p := filepath.Join(dir, "bin", "stripe-mock")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatalf("stripe-mock not found: run the tests with `make test` (it installs it), or "+
		"`go install github.com/stripe/stripe-mock@%s`, or set STRIPE_MOCK_BIN", StripeMockVersion)
	return ""
}

var listening = regexp.MustCompile(`Listening for HTTP at address: (\S+)`)

// StripeMock starts stripe-mock on a free loopback port for this test (HTTPS
// on a Unix socket in the test's temp dir, so no other port is taken) and
// returns its base URL. stripe-mock is stateless: it validates each request
// against Stripe's OpenAPI spec and answers a fixture.
func StripeMock(t testing.TB) string {
	t.Helper()
	bin := StripeMockBinary(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "-http-addr", "127.0.0.1:0", "-https-unix", filepath.Join(t.TempDir(), "https.sock"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		t.Fatalf("stripe-mock: %v", err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start stripe-mock (%s): %v", bin, err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		var lines []string
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
				// keep draining so stripe-mock never blocks on its output
				for sc.Scan() {
				}
				return
			}
		}
		addr <- "" + strings.Join(lines, "\n")
	}()
	select {
	case a := <-addr:
		if !strings.HasPrefix(a, "127.0.0.1:") {
			t.Fatalf("stripe-mock did not start: %s", a)
		}
		return "http://" + a
	case <-time.After(20 * time.Second):
		t.Fatalf("stripe-mock did not report its address within 20s")
	}
	return ""
}
