package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Help and version need no configuration: `serve --help` and `migrate
// --help` used to fail with "configuration: missing required settings".
func TestHelpAndVersionNeedNoConfiguration(t *testing.T) {
	for _, k := range []string{"APP_ENV", "DATABASE_URL", "STRIPE_WEBHOOK_SECRET", "STRIPE_API_KEY", "INTERNAL_API_TOKEN"} {
		t.Setenv(k, "")
	}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--help"}, "usage: stripe-payments serve"},
		{[]string{"serve", "-h"}, "usage: stripe-payments serve"},
		{[]string{"migrate", "--help"}, "usage: stripe-payments migrate"},
		{[]string{"migrate", "-help"}, "usage: stripe-payments migrate"},
		{[]string{"version"}, "stripe-payments "},
		{[]string{"--version"}, "stripe-payments "},
		{[]string{"help"}, "version        print the version"},
		{[]string{"poll", "--help"}, "usage: stripe-payments poll"},
		{[]string{"billing", "--help"}, "usage: stripe-payments billing"},
		{[]string{"reconcile", "--help"}, "usage: stripe-payments reconcile"},
		{[]string{"billing", "collect", "-h"}, "-date"},
		{[]string{"events", "--help"}, "usage: stripe-payments events sign"},
		{[]string{"events", "sign", "--help"}, "-secret"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			require.NoError(t, run(context.Background(), tc.args, strings.NewReader(""), &stdout, &stderr))
			assert.Contains(t, stdout.String(), tc.want)
			assert.NotContains(t, stderr.String(), "configuration")
		})
	}
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"serve", "extra"}, strings.NewReader(""), &stdout, &stderr)
	require.Error(t, err, "an unknown argument is refused, not ignored")
	assert.Contains(t, err.Error(), "takes no arguments")
}
