// Package failcause names what a failure is about in a few words: an error
// message's normalised cause class, so failures that differ only in the
// objects they were about share a cause. The console's dead-letter list
// stores it when an event fails (package opsdata) and incidents group by it
// (package incidents); it is a package of its own so both can use it.
package failcause

import (
	"regexp"
	"strings"
	"time"
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

// Version names the classifier (Classify, Normalise) that computed a
// stored cause: bump it whenever a change to them would give a message
// another cause, and the next read of the incidents classifies the rows
// an older one computed again.
const Version = 1

// stripeErrorTypes are the types of Stripe's API errors.
var stripeErrorTypes = []string{"api_error", "card_error", "idempotency_error", "invalid_request_error",
	"rate_limit_error", "authentication_error", "api_connection_error", "permission_error"}

var stripeErrorType = regexp.MustCompile(`"type":\s*"(` + strings.Join(stripeErrorTypes, "|") + `)"`)

// Classify returns the normalised cause class of an error message: one of
// the known classes, or "other:" and the message normalised (Normalise)
// and cut between words to MaxText, so two failures that differ only
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
	s := cutWords(Normalise(msg), MaxText)
	return "other:" + s
}

// Classes are the cause classes Classify names besides "other:…".
func Classes() []string {
	out := make([]string, 0, len(classes)+len(stripeErrorTypes)+1)
	for _, c := range classes {
		out = append(out, c.class)
	}
	for _, t := range stripeErrorTypes {
		out = append(out, "stripe_"+t)
	}
	return append(out, "unknown")
}

// OfEvent is the cause of an event listed as failed or rejected with error
// msg: its class, prefixed "rejected." for a rejection.
func OfEvent(outcome, msg string) string { return ForOutcome(outcome, Classify(msg)) }

// ForOutcome is OfEvent for a message already classified as class (a
// caller that caches Classify).
func ForOutcome(outcome, class string) string {
	if outcome == "rejected" {
		return "rejected." + class
	}
	return class
}

// Group is failures that share a type, an account and a message (or a
// cause): how many, the first and the last seen, and the newest ids. The
// owners of the failing rows answer them; incidents merges them by cause.
type Group struct {
	Type, Account, Message string
	Count                  int64
	First, Last            time.Time
	Samples                []string
}
