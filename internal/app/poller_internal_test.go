package app

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestWebhookURL(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:8080": "http://127.0.0.1:8080/webhooks/stripe",
		":8080":          "http://127.0.0.1:8080/webhooks/stripe",
		"0.0.0.0:9000":   "http://127.0.0.1:9000/webhooks/stripe",
		"[::]:9000":      "http://127.0.0.1:9000/webhooks/stripe",
		"[::1]:9000":     "http://[::1]:9000/webhooks/stripe",
		"svc.local:80":   "http://svc.local:80/webhooks/stripe",
	} {
		assert.Equal(t, want, webhookURL(addr), addr)
	}
}
