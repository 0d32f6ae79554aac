package incidents

import (
	"regexp"
	"strings"
)

// classes map an error message to a cause class, first match wins: the
// dependencies (a DynamoDB or Postgres outage is one cause whatever call it
// broke) before Stripe's own answers, before the generic network failures.
var classes = []struct {
	class string
	re    *regexp.Regexp // matched against the lower-cased message
}{
	{"stripe_rate_limited", regexp.MustCompile(`rate.?limit|too many requests|\b429\b|budget`)},
	{"dynamodb_unavailable", regexp.MustCompile(`dynamodb|provisionedthroughputexceeded|throttlingexception`)},
	{"postgres_unavailable", regexp.MustCompile(`postgres|pgx|pgconn|sqlstate|database`)},
	{"stripe_auth", regexp.MustCompile(`invalid api key|api key provided|\b401\b|\b403\b|permission`)},
	{"stripe_resource_missing", regexp.MustCompile(`resource_missing|no such [a-z_ ]+:`)},
	{"stripe_unreachable", regexp.MustCompile(`stripe.*(unreachable|connection|timeout|timed out|eof|\b5\d\d\b)|api\.stripe\.com`)},
	{"timeout", regexp.MustCompile(`deadline exceeded|timeout|timed out`)},
	{"network", regexp.MustCompile(`connection refused|connection reset|broken pipe|no such host|unexpected eof|\beof\b`)},
	{"invalid_payload", regexp.MustCompile(`invalid character|unmarshal|cannot parse|not an event|malformed`)},
}

// CauseVersion names the classifier (Classify, Normalise) that computed a
// stored cause: bump it whenever a change to them would give a message
// another cause, and the next read of the incidents classifies the rows
// an older one computed again.
const CauseVersion = 1

// stripeErrorTypes are the types of Stripe's API errors.
var stripeErrorTypes = []string{"api_error", "card_error", "idempotency_error", "invalid_request_error",
	"rate_limit_error", "authentication_error", "api_connection_error", "permission_error"}

var stripeErrorType = regexp.MustCompile(`"type":\s*"(` + strings.Join(stripeErrorTypes, "|") + `)"`)

// Classify returns the normalised cause class of an error message: one of
// the known classes, or "other:" and the message normalised (Normalise)
// and cut between words to MaxCauseText, so two failures that differ only
// in the objects they were about share a cause.
func Classify(msg string) string {
	msg = strings.TrimSpace(msg)
	if msg == "" {
		return "unknown"
	}
	// A Stripe API error (stripe-go renders it as JSON): its type is the
	// cause, whatever object and request it was about.
	if m := stripeErrorType.FindStringSubmatch(msg); m != nil {
		return "stripe_" + m[1]
	}
	// Lower-cased once rather than matched case-insensitively: (?i)
	// folding made classification the bulk of an incidents read (10,000
	// distinct messages: ~230 ms).
	low := strings.ToLower(msg)
	for _, c := range classes {
		if c.re.MatchString(low) {
			return c.class
		}
	}
	s := cutWords(Normalise(msg), MaxCauseText)
	return "other:" + s
}
