package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The tests in this package that need the real program build it once, with
// -race when the tests run with -race (the race objects are then already in
// the build cache, so it is a link), and run it as an operator would.
var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// goTool finds the go command of this toolchain.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// binary builds cmd/stripe-payments into a temporary directory, once.
func binary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "stripe-payments-bin-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "stripe-payments")
		args := []string{"build", "-o", binPath}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command(goTool(), append(args, ".")...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		if err := cmd.Run(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out.String())
			return
		}
		fmt.Fprintf(os.Stderr, "built %s (race %v) in %s\n", binPath, raceEnabled, time.Since(start).Round(time.Millisecond))
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// freeAddr returns a loopback address with a port nobody listens on now.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// loopbackPort is freeAddr where no test is at hand (it panics instead).
func loopbackPort() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// environ is the process environment with overrides applied, in
// development mode (APP_ENV=development, as `make test` sets) unless the
// overrides say otherwise.
func environ(overrides map[string]string) []string {
	if _, ok := overrides["APP_ENV"]; !ok {
		overrides["APP_ENV"] = "development"
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := overrides[k]; !ok {
			env = append(env, kv)
		}
	}
	return append(env, assignments(overrides)...)
}

// assignments are vars as NAME=value, sorted by name.
func assignments(vars map[string]string) []string {
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, k+"="+vars[k])
	}
	return out
}

// runCommand runs the binary to completion (migrate, poll) and returns its
// stdout and stderr.
func runCommand(t testing.TB, bin string, env []string, timeout time.Duration, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("%s did not finish within %s: %w", strings.Join(args, " "), timeout, ctx.Err())
	}
	return o.String(), e.String(), err
}

// server is `stripe-payments serve` as a child process that can be killed
// and started again on the same addresses: addr is the public listener
// (LISTEN_ADDR), admin the admin one (ADMIN_LISTEN_ADDR in env).
type server struct {
	t      testing.TB
	bin    string
	env    []string
	addr   atomic.Pointer[string] // read by load generators while it restarts
	admin  atomic.Pointer[string]
	logDir string
	runs   int
	cmd    *exec.Cmd
	exited chan error
	logs   []string // one file per run
}

func newServer(t testing.TB, bin string, env []string, addr string) *server {
	s := &server{t: t, bin: bin, env: env, logDir: t.TempDir()}
	s.addr.Store(&addr)
	admin := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "ADMIN_LISTEN_ADDR="); ok {
			admin = v
		}
	}
	if admin == "" {
		t.Fatal("newServer: the environment has no ADMIN_LISTEN_ADDR (use with)")
	}
	s.admin.Store(&admin)
	t.Cleanup(func() {
		if s.cmd != nil {
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
	})
	return s
}

// url is the public listener's base URL: the webhook and /healthz.
func (s *server) url() string { return "http://" + *s.addr.Load() }

// adminURL is the admin listener's: the console, the APIs, /metrics,
// /readyz.
func (s *server) adminURL() string { return "http://" + *s.admin.Load() }

// urlFor is the base URL that serves path: the public listener for the
// webhook, the admin listener for everything else.
func (s *server) urlFor(path string) string {
	if strings.HasPrefix(path, "/webhooks/") {
		return s.url()
	}
	return s.adminURL()
}

// start runs serve and waits until /healthz answers. While the server was
// down, its port may have been taken (by an outgoing connection's ephemeral
// port, or another test): then it moves to a new free port.
func (s *server) start() time.Duration {
	s.t.Helper()
	begin := time.Now()
	for attempt := 1; ; attempt++ {
		err := s.try()
		if err == nil {
			return time.Since(begin)
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			s.t.Fatal(err)
		}
		addr, admin := freeAddr(s.t), freeAddr(s.t)
		s.addr.Store(&addr)
		s.admin.Store(&admin)
		for i, kv := range s.env {
			if strings.HasPrefix(kv, "LISTEN_ADDR=") {
				s.env[i] = "LISTEN_ADDR=" + addr
			}
			if strings.HasPrefix(kv, "ADMIN_LISTEN_ADDR=") {
				s.env[i] = "ADMIN_LISTEN_ADDR=" + admin
			}
		}
	}
}

// try starts serve once and waits until it is healthy or has exited.
func (s *server) try() error {
	s.runs++
	path := filepath.Join(s.logDir, fmt.Sprintf("serve-%02d.log", s.runs))
	logf, err := os.Create(path)
	if err != nil {
		s.t.Fatal(err)
	}
	s.logs = append(s.logs, path)
	cmd := exec.Command(s.bin, "serve")
	cmd.Env = s.env
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start serve: %w", err)
	}
	s.cmd, s.exited = cmd, make(chan error, 1)
	go func() { s.exited <- cmd.Wait(); _ = logf.Close() }()
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case err := <-s.exited:
			s.cmd = nil
			return fmt.Errorf("serve (run %d) exited before it was healthy: %v\n%s", s.runs, err, tail(path, 30))
		default:
		}
		if resp, err := client.Get(s.url() + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("serve (run %d) not healthy within 20s\n%s", s.runs, tail(path, 30))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill sends SIGKILL: no shutdown code runs, in-flight work is lost.
func (s *server) kill() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		s.t.Fatalf("kill -9: %v", err)
	}
	<-s.exited
	s.cmd = nil
}

// stop sends SIGTERM and returns the exit error (nil: a clean exit; a race
// detected by a -race binary exits 66).
func (s *server) stop(timeout time.Duration) error {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		if errors.Is(err, os.ErrProcessDone) {
			// It ended on its own before it was asked to: say how, and why.
			exit := <-s.exited
			s.cmd = nil
			return fmt.Errorf("serve exited before SIGTERM (%v); its last log lines:\n%s", exit, tail(s.logs[len(s.logs)-1], 40))
		}
		return err
	}
	select {
	case err := <-s.exited:
		s.cmd = nil
		return err
	case <-time.After(timeout):
		_ = s.cmd.Process.Kill()
		<-s.exited
		s.cmd = nil
		return errors.New("serve did not stop within " + timeout.String() + " of SIGTERM")
	}
}

// allLogs concatenates the logs of every run.
func (s *server) allLogs() string {
	var b strings.Builder
	for _, p := range s.logs {
		data, _ := os.ReadFile(p)
		b.Write(data)
	}
	return b.String()
}

func tail(path string, n int) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
