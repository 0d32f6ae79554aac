package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// defaultAdminAddr is ADMIN_LISTEN_ADDR's default (internal/config).
const defaultAdminAddr = "127.0.0.1:8081"

const healthcheckUsage = `usage: stripe-payments healthcheck [flags]

Asks this machine's admin listener (ADMIN_LISTEN_ADDR, default ` + defaultAdminAddr + `)
whether the service is ready (GET /readyz: its stores answer) or, with
--live, alive (GET /healthz). Exits 0 on a 200 and 1 otherwise, with one
line saying why. It reads no other setting, so it runs where nothing but
the binary is (the image's HEALTHCHECK: no shell, no curl). An address on
every interface (0.0.0.0, ::, or no host) is checked on 127.0.0.1.

flags:
`

// healthcheck is the `healthcheck` subcommand; getenv reads the environment.
func healthcheck(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	live := fs.Bool("live", false, "ask /healthz (the process answers) instead of /readyz (it can serve)")
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this `DURATION` (/readyz gives its checks 3s)")
	addr := fs.String("addr", "", "the admin listener's `HOST:PORT` (default $ADMIN_LISTEN_ADDR, else "+defaultAdminAddr+")")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), healthcheckUsage)
		fs.PrintDefaults()
	}
	if helpAsked(args) {
		fs.SetOutput(stdout)
		fs.Usage()
		return nil
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("healthcheck takes no arguments, only flags (healthcheck -h)")
	}
	if *timeout <= 0 {
		return errors.New("healthcheck: --timeout must be positive")
	}
	name := "--addr"
	if *addr == "" {
		*addr, name = strings.TrimSpace(getenv("ADMIN_LISTEN_ADDR")), "ADMIN_LISTEN_ADDR"
	}
	if *addr == "" {
		*addr = defaultAdminAddr
	}
	target, err := checkAddr(*addr)
	if err != nil {
		return fmt.Errorf("unhealthy: %s %q: %w", name, *addr, err)
	}
	path := "/readyz"
	if *live {
		path = "/healthz"
	}
	url := "http://" + target + path
	line, err := probe(ctx, url, *timeout)
	if err != nil {
		return fmt.Errorf("unhealthy: GET %s: %w", url, err)
	}
	fmt.Fprintf(stdout, "ok: GET %s: %s\n", url, line)
	return nil
}

// checkAddr is the address to dial for a listener on addr: one on every
// interface is reached on loopback, since the check runs beside it.
func checkAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if host == "" || net.ParseIP(host) != nil && net.ParseIP(host).IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// probe GETs url and returns "200", or an error with the status and the
// start of the answer (on one line: /readyz names the failed check).
func probe(ctx context.Context, url string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	// Its own transport: no proxy from the environment, no kept connections.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("no answer within %s", timeout)
		}
		return "", errors.Unwrap(err) // the url.Error repeats the method and URL
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%d %s", resp.StatusCode, strings.Join(strings.Fields(string(body)), " "))
	}
	return "200", nil
}
