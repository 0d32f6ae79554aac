package main

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/config"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// The fail-closed tests (docs/design.md §3 "Production fails closed") run the real
// binary with a clean environment: only what each case sets, so nothing of
// the developer's shell (or of `make test`'s APP_ENV=development) leaks in.

// cleanEnv is PATH plus vars.
func cleanEnv(vars map[string]string) []string {
	return append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, assignments(vars)...)
}

// prodVars is a complete production configuration of serve: no variable
// missing, no development value.
func prodVars() map[string]string {
	return map[string]string{
		"LISTEN_ADDR":             "127.0.0.1:1", // never reached: startup fails first
		"STRIPE_WEBHOOK_SECRET":   "whsec_fake_prod_" + randomHex(8),
		"STRIPE_API_KEY":          "sk_live_" + randomHex(8),
		"STRIPE_PLATFORM_ACCOUNT": "acct_1ProdPlatform",
		"DATABASE_URL":            "postgres://app:pw@127.0.0.1:1/payments",
		"DYNAMODB_ENDPOINT":       "http://127.0.0.1:1",
		"INTERNAL_API_TOKEN":      "tok_" + randomHex(16),
		"ACTIONS_URL":             "http://127.0.0.1:1/actions",
		"ACTIONS_SECRET":          "act_" + randomHex(8),
	}
}

// mustRefuse runs the binary and requires a configuration error: exit status
// 1, nothing on stdout, and stderr naming each of want.
func mustRefuse(t *testing.T, bin string, vars map[string]string, want []string, args ...string) string {
	t.Helper()
	stdout, stderr, err := runCommand(t, bin, cleanEnv(vars), 30*time.Second, args...)
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "%v must fail at startup; err=%v\nstderr: %s", args, err, stderr)
	assert.Equal(t, 1, exit.ExitCode(), stderr)
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, "configuration:", "a configuration error, not a failed connection")
	for _, name := range want {
		assert.Contains(t, stderr, name)
	}
	return stderr
}

// TestStartupFailsClosed: outside development mode every subcommand refuses
// to start when a required setting it uses is missing or blank, naming
// every missing variable in one error and exiting 1; a required setting it
// does not use is never asked for.
func TestStartupFailsClosed(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	required := []string{"STRIPE_WEBHOOK_SECRET", "STRIPE_API_KEY", "STRIPE_PLATFORM_ACCOUNT", "DATABASE_URL", "INTERNAL_API_TOKEN", "ACTIONS_SECRET"}

	t.Run("serve, each missing or blank", func(t *testing.T) {
		for _, name := range required {
			for _, value := range []string{"<unset>", "", "   "} {
				t.Run(name+"="+value, func(t *testing.T) {
					vars := prodVars()
					delete(vars, name)
					if value != "<unset>" {
						vars[name] = value
					}
					line := missingLine(mustRefuse(t, bin, vars, []string{"missing required settings", name}, "serve"))
					for _, other := range required {
						if other != name {
							assert.NotContains(t, line, other, "only %s is missing", name)
						}
					}
				})
			}
		}
	})

	t.Run("APP_ENV other than development is production", func(t *testing.T) {
		for _, appEnv := range []string{"", "production", "dev", "Development"} {
			vars := prodVars()
			vars["APP_ENV"] = appEnv
			delete(vars, "STRIPE_WEBHOOK_SECRET")
			mustRefuse(t, bin, vars, []string{"STRIPE_WEBHOOK_SECRET"}, "serve")
		}
	})

	t.Run("every missing one named at once", func(t *testing.T) {
		line := missingLine(mustRefuse(t, bin, map[string]string{"ACTIONS_URL": "http://127.0.0.1:1/a", "STRIPE_WEBHOOK_SECRET": " , "},
			required, "serve"))
		for _, name := range required {
			assert.Contains(t, line, name, "one error names every missing variable")
		}
	})

	// Each subcommand with nothing set: it names what it uses, and only that.
	subcommands := []struct {
		args  []string
		needs []string
	}{
		{[]string{"serve"}, required},
		{[]string{"migrate"}, []string{"DATABASE_URL"}},
		{[]string{"poll"}, []string{"STRIPE_WEBHOOK_SECRET", "STRIPE_API_KEY", "STRIPE_PLATFORM_ACCOUNT", "DATABASE_URL"}},
		{[]string{"poll", "--in-process"}, []string{"STRIPE_API_KEY", "STRIPE_PLATFORM_ACCOUNT", "DATABASE_URL"}},
		{[]string{"poll", "--dry-run"}, []string{"STRIPE_API_KEY", "STRIPE_PLATFORM_ACCOUNT", "DATABASE_URL"}},
		{[]string{"poll", "--stuck"}, []string{"STRIPE_WEBHOOK_SECRET", "STRIPE_API_KEY", "STRIPE_PLATFORM_ACCOUNT", "DATABASE_URL"}},
		{[]string{"billing", "remind"}, []string{"STRIPE_API_KEY", "DATABASE_URL"}},
		{[]string{"billing", "collect"}, []string{"STRIPE_API_KEY", "DATABASE_URL"}},
		{[]string{"events", "sign"}, []string{"STRIPE_WEBHOOK_SECRET"}},
	}
	for _, sc := range subcommands {
		t.Run(strings.Join(sc.args, " ")+" needs only what it uses", func(t *testing.T) {
			stderr := mustRefuse(t, bin, map[string]string{"ACTIONS_URL": "http://127.0.0.1:1/a"}, sc.needs, sc.args...)
			for _, name := range required {
				if !contains(sc.needs, name) {
					assert.NotContains(t, stderr, name, "%v does not use %s", sc.args, name)
				}
			}
		})
	}

	t.Run("events sign with only its secret", func(t *testing.T) {
		cmd := exec.Command(bin, "events", "sign")
		cmd.Env = cleanEnv(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_fake_only_" + randomHex(6)})
		cmd.Stdin = strings.NewReader(`{"id":"evt_1"}`)
		out, err := cmd.Output()
		require.NoError(t, err)
		assert.Regexp(t, `^t=\d+,v1=[0-9a-f]{64}\n$`, string(out))
		cmd = exec.Command(bin, "events", "sign", "-secret", "whsec_fake_flag")
		cmd.Env = cleanEnv(nil)
		cmd.Stdin = strings.NewReader(`{"id":"evt_1"}`)
		_, err = cmd.Output()
		require.NoError(t, err, "with -secret, events sign needs no configuration at all")
	})

	t.Run("migrate with only its database settings", func(t *testing.T) {
		names := map[string]string{"EVENTS_TABLE": testenv.TableName("events"), "BILLING_TABLE": testenv.TableName("billing"),
			"BILLING_HISTORY_TABLE": testenv.TableName("history"), "LOCKS_TABLE": testenv.TableName("locks")}
		ddb := testenv.Dynamo(t)
		t.Cleanup(func() {
			for _, table := range names {
				_, _ = ddb.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
			}
		})
		vars := map[string]string{"DATABASE_URL": testenv.DatabaseURL(t), "DYNAMODB_ENDPOINT": testenv.DynamoEndpoint(t),
			"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}
		for k, v := range names {
			vars[k] = v
		}
		_, stderr, err := runCommand(t, bin, cleanEnv(vars), time.Minute, "migrate")
		require.NoError(t, err, stderr)
	})
}

// TestLiveKeyRefusesDevValues: a live key (sk_live_, rk_live_) together
// with any development value — defaulted in development mode, or set by
// hand in either mode — is refused at startup.
func TestLiveKeyRefusesDevValues(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	devValues := map[string]string{
		"STRIPE_WEBHOOK_SECRET":   config.DevWebhookSecret,
		"STRIPE_PLATFORM_ACCOUNT": config.DevPlatformAccount,
		"DATABASE_URL":            config.DevDatabaseURL,
		"DYNAMODB_ENDPOINT":       config.DevDynamoEndpoint,
		"INTERNAL_API_TOKEN":      config.DevInternalAPIToken,
		"ACTIONS_SECRET":          config.DevActionsSecret,
	}
	for _, key := range []string{"sk_live_", "rk_live_"} {
		for name, value := range devValues {
			for _, mode := range []string{"development", "production"} {
				t.Run(key+"/"+name+"/set/"+mode, func(t *testing.T) {
					vars := prodVars()
					vars["STRIPE_API_KEY"] = key + randomHex(8)
					vars[name] = value
					if mode == "development" {
						vars["APP_ENV"] = "development"
					}
					stderr := mustRefuse(t, bin, vars, []string{"live key", name}, "serve")
					assert.NotContains(t, stderr, value, "the error names the variable, never its value")
				})
			}
			if name == "DYNAMODB_ENDPOINT" {
				continue // outside development an unset endpoint is AWS: no dev default to fall back to
			}
			t.Run(key+"/"+name+"/defaulted in development", func(t *testing.T) {
				vars := prodVars()
				vars["APP_ENV"] = "development"
				vars["STRIPE_API_KEY"] = key + randomHex(8)
				delete(vars, name)
				mustRefuse(t, bin, vars, []string{"live key", name}, "serve")
			})
		}
	}
	t.Run("migrate with a live key and the dev database", func(t *testing.T) {
		mustRefuse(t, bin, map[string]string{"APP_ENV": "development", "STRIPE_API_KEY": "sk_live_" + randomHex(8)},
			[]string{"live key", "DATABASE_URL"}, "migrate")
	})
}

// TestStartupRefusesUnsafeProductionSettings: outside development mode
// serve refuses, naming the variable, a Stripe API base that is not
// https:// (the key would travel in clear text), a profiling listener
// off loopback, and an INTERNAL_API_TOKEN with fewer than 12 distinct
// characters (docs/design.md §3).
func TestStartupRefusesUnsafeProductionSettings(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	for _, tc := range []struct{ name, value, want string }{
		{"STRIPE_API_BASE", "http://api.stripe.com", "STRIPE_API_BASE: must be an https:// URL"},
		{"PPROF_ADDR", "0.0.0.0:6060", "PPROF_ADDR: must bind to loopback"},
		{"PPROF_ADDR", ":6060", "PPROF_ADDR: must bind to loopback"},
		{"INTERNAL_API_TOKEN", strings.Repeat("ab", 32), "INTERNAL_API_TOKEN: at least 32 characters with at least 12 distinct ones"},
	} {
		t.Run(tc.name+"="+tc.value, func(t *testing.T) {
			vars := prodVars()
			vars[tc.name] = tc.value
			mustRefuse(t, bin, vars, []string{tc.want}, "serve")
		})
	}
}

// TestServeStartsInProductionMode: with every required setting given (a
// test key, the local stack named explicitly) serve starts without
// APP_ENV, so production mode needs nothing from the dev defaults.
func TestServeStartsInProductionMode(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	addr := freeAddr(t)
	vars := map[string]string{
		"LISTEN_ADDR":             addr,
		"ADMIN_LISTEN_ADDR":       freeAddr(t),
		"STRIPE_WEBHOOK_SECRET":   "whsec_fake_prod_" + randomHex(8),
		"STRIPE_API_KEY":          "sk_test_" + randomHex(8),
		"STRIPE_API_BASE":         "https://127.0.0.1:1",
		"STRIPE_PLATFORM_ACCOUNT": "acct_1ProdPlatform",
		"DATABASE_URL":            testenv.DatabaseURL(t),
		"DYNAMODB_ENDPOINT":       testenv.DynamoEndpoint(t),
		"AWS_REGION":              "us-east-1",
		"AWS_ACCESS_KEY_ID":       "local",
		"AWS_SECRET_ACCESS_KEY":   "local",
		"EVENTS_TABLE":            testenv.TableName("events"),
		"INTERNAL_API_TOKEN":      "disabled",
	}
	srv := newServer(t, bin, cleanEnv(vars), addr)
	srv.start()
	resp, err := http.Get(srv.adminURL() + "/internal/v1/events/evt_1")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "INTERNAL_API_TOKEN=disabled: the internal routes do not exist")
	require.NoError(t, srv.stop(30*time.Second))
	logs := srv.allLogs()
	assert.Contains(t, logs, `"development":false`)
	assert.NotContains(t, logs, "local development", "no dev default in production mode")
}

// missingLine is the line of the error that lists the missing settings.
func missingLine(stderr string) string {
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(l, "missing required settings") {
			return l
		}
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
