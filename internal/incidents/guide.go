package incidents

import (
	"strings"
)

// Guide is what an operator reads about an incident: what broke in words,
// what to do, where the runbook is, and whether a replay can succeed.
type Guide struct {
	Title string
	// Action is one line of what to do.
	Action string
	// Runbook is the path of the runbook (or docs page) from the
	// repository's root, as the alerts' runbook_url names them.
	Runbook string
	// Replayable: re-driving the occurrences can succeed now. A rejected
	// event is rejected again (same payload, same code) until the cause is
	// fixed; thin events are retried by the hydrator; a billing incident
	// is settled by rerunning its job.
	Replayable bool
}

const (
	runbookDir          = "docs/runbooks/"
	runbookFailing      = runbookDir + "StripePaymentsEventsFailing.md"
	runbookRejected     = runbookDir + "StripePaymentsEventRejected.md"
	runbookThin         = runbookDir + "StripePaymentsThinHydrationBacklog.md"
	runbookDeadLetters  = runbookDir + "StripePaymentsOutboxDeadLetters.md"
	runbookBillingRun   = runbookDir + "StripePaymentsBillingRunFailed.md"
	runbookUnresolved   = runbookDir + "StripePaymentsBillingUnresolvedCharges.md"
	runbookBillingQueue = runbookDir + "StripePaymentsBillingQueueNotDrained.md"
	runbookNotReady     = runbookDir + "StripePaymentsNotReady.md"
	runbookRateLimited  = runbookDir + "StripePaymentsStripeRateLimited.md"
	docsConfiguration   = "docs/configuration.md"
	unrecognisedTitle   = "Unrecognised error: "
	rejectedTitlePrefix = "Rejected: "
	// unprocessableText ends the wrapping of a rejection's message
	// (stripeevent.ErrUnprocessable).
	unprocessableText = "cannot be processed: "
)

// classGuide is a cause class in words.
type classGuide struct {
	title, action string
	// runbook for a failed event of this class ("": runbookFailing).
	runbook string
}

// classGuides has an entry for every class failcause.Classify names
// (failcause.Classes).
var classGuides = map[string]classGuide{
	"stripe_rate_limited":          {"Stripe rate limit or API budget exhausted", "Stripe or the shared API budget throttled the calls; they succeed once the load drops.", runbookRateLimited},
	"stripe_rate_limit_error":      {"Stripe rate limit reached", "Stripe throttled the calls; they succeed once the load drops.", runbookRateLimited},
	"dynamodb_unavailable":         {"DynamoDB unavailable or throttled", "Check /readyz and DynamoDB (throttling, capacity, credentials).", runbookNotReady},
	"postgres_unavailable":         {"Postgres unavailable", "Check /readyz and Postgres (connections, disk, failover).", runbookNotReady},
	"stripe_auth":                  {"Stripe refused the API key", "Check STRIPE_API_KEY (rotated, revoked, test or live) and the platform's Connect permissions.", docsConfiguration},
	"stripe_authentication_error":  {"Stripe refused the API key", "Check STRIPE_API_KEY (rotated, revoked, test or live).", docsConfiguration},
	"stripe_permission_error":      {"Stripe denied the platform access", "Check the platform's Connect permissions on the account, and the key's restrictions.", docsConfiguration},
	"stripe_resource_missing":      {"Stripe has no such object", "The object is missing on that account (deleted, another account, test or live): read a sample event's error.", ""},
	"stripe_unreachable":           {"Stripe unreachable", "Check status.stripe.com and the egress to api.stripe.com.", ""},
	"stripe_api_connection_error":  {"Stripe unreachable", "Check status.stripe.com and the egress to api.stripe.com.", ""},
	"stripe_api_error":             {"Stripe failed on its side", "Check status.stripe.com; Stripe's server errors pass.", ""},
	"stripe_invalid_request_error": {"Stripe refused a request as invalid", "Usually a bug or a configuration mismatch (API version, account): read a sample event's error.", ""},
	"stripe_card_error":            {"Card declined", "The customer's card was declined: read a sample event's error for the decline code.", ""},
	"stripe_idempotency_error":     {"Idempotency key reused with other parameters", "A retry sent other parameters under the same key (usually a bug): read a sample event's error.", ""},
	"timeout":                      {"Timed out", "A dependency answered too slowly: check /readyz and the latency panels.", ""},
	"network":                      {"Network error", "Connections were refused or reset: check the network path to the dependencies.", ""},
	"invalid_payload":              {"Payload could not be decoded", "The event or an answer to it did not decode: read a sample event's error and payload.", ""},
	"unknown":                      {"Failed without an error message", "Read a sample event's page and the service's log at its time.", ""},
}

// describeClass is a cause class (or "other:<text>") in words.
func describeClass(class string) classGuide {
	if g, ok := classGuides[class]; ok {
		return g
	}
	if text, ok := strings.CutPrefix(class, "other:"); ok {
		return classGuide{title: unrecognisedTitle + text,
			action: "No known cause: read a sample event's error and the service's log at its time."}
	}
	// A class a newer version named: shown in words, never cut.
	return classGuide{title: "Failure: " + strings.ReplaceAll(class, "_", " "),
		action: "Read a sample event's error and the service's log at its time."}
}

// reason is a class's title after a prefix that already says it failed:
// an unrecognised error's text alone.
func reason(title string) string {
	if text, ok := strings.CutPrefix(title, unrecognisedTitle); ok {
		return text
	}
	return title
}

// Describe says what an incident is in words, what to do and whether a
// replay can succeed.
func Describe(inc Incident) Guide {
	switch inc.Kind {
	case KindDelivery:
		c := describeClass(inc.Cause)
		return Guide{Title: "Dead letters: " + reason(c.title),
			Action:  "The receiver kept failing: fix it (its logs, its URL), then re-drive them with Replay; the receiver deduplicates by message id.",
			Runbook: runbookDeadLetters, Replayable: true}
	case KindBilling:
		switch inc.Cause {
		case CauseChargeOutcomeUnknown:
			return Guide{Title: "Charges with an unknown outcome",
				Action:  "The next collection asks Stripe first and records what it finds (nothing is charged twice); rerun collect for the same date to settle them now.",
				Runbook: runbookUnresolved}
		case CauseRunEntriesFailed:
			return Guide{Title: "Billing run left entries failed",
				Action:  "Read the run's log lines for the entries' errors, fix the cause, then rerun the job for the same date.",
				Runbook: runbookBillingRun}
		case CauseQueueDeadLetter:
			return Guide{Title: "Billing queue message dead-lettered",
				Action:  "The account's collection failed on every receive (or its lock was held throughout): read the worker's log lines for the account, fix the cause, then redrive the billing dead-letter queue or rerun collect for the date.",
				Runbook: runbookBillingQueue}
		case CauseRunAccountsLocked:
			return Guide{Title: "Billing run skipped locked accounts",
				Action:  "Another holder kept those accounts' locks for the whole run; rerun the job for the same date once it let go.",
				Runbook: runbookBillingRun}
		}
		c := describeClass(inc.Cause)
		return Guide{Title: "Billing run failed: " + reason(c.title),
			Action:  c.action + " Then rerun the job for the same date.",
			Runbook: runbookBillingRun}
	}
	if class, ok := strings.CutPrefix(inc.Cause, "hydration."); ok {
		if class == "pending" {
			return Guide{Title: "Thin events waiting to be fetched from Stripe",
				Action:  "The hydrator fetches them by itself within the Stripe API budget: check the budget and Stripe's reachability.",
				Runbook: runbookThin}
		}
		c := describeClass(class)
		return Guide{Title: "Thin events not fetched: " + reason(c.title),
			Action:  c.action + " The hydrator retries them by itself.",
			Runbook: runbookThin}
	}
	if class, ok := strings.CutPrefix(inc.Cause, "rejected."); ok {
		title := describeClass(class).title
		if text, ok := strings.CutPrefix(title, unrecognisedTitle); ok {
			// "Rejected" says the object cannot be processed: the title is
			// the reason after the wrappers that say so.
			if _, reason, ok := strings.Cut(text, unprocessableText); ok && reason != "" {
				text = reason
			}
			title = text
		}
		return Guide{Title: rejectedTitlePrefix + title,
			Action: "Find why in a sample event's error and fix the cause (usually a bug: deploy the fix); " +
				"a replay before the fix is rejected again, since the payload and the code are unchanged.",
			Runbook: runbookRejected}
	}
	c := describeClass(inc.Cause)
	runbook := c.runbook
	if runbook == "" {
		runbook = runbookFailing
	}
	return Guide{Title: c.title, Action: c.action + " Then replay them: an event already applied is not applied twice.",
		Runbook: runbook, Replayable: true}
}
