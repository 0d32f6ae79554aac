package stripeclient

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestLeveledLogger(t *testing.T) {
	tests := []struct {
		name      string
		quiet     bool
		log       func(l leveledLogger)
		want      string
		wantLevel string
		absent    string
	}{
		{"response bodies are never logged", false,
			func(l leveledLogger) { l.Debugf("Response: %s", `{"client_secret":"pi_1_secret_abc"}`) },
			"body not logged", "DEBUG", "pi_1_secret_abc"},
		{"errors at error level", false, func(l leveledLogger) { l.Errorf("Request error from Stripe (status 500)") }, "status 500", "ERROR", ""},
		{"quiet errors at debug level", true, func(l leveledLogger) { l.Errorf("Request error from Stripe (status 429)") }, "status 429", "DEBUG", ""},
		{"quiet warnings at debug level", true, func(l leveledLogger) { l.Warnf("retrying") }, "retrying", "DEBUG", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
			tc.log(leveledLogger{log: log, quiet: tc.quiet})
			assert.Contains(t, buf.String(), tc.want)
			assert.Contains(t, buf.String(), `"level":"`+tc.wantLevel+`"`)
			if tc.absent != "" {
				assert.NotContains(t, buf.String(), tc.absent)
			}
		})
	}
}
