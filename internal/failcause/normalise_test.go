package failcause_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/failcause"
)

// Every variable part of an error message is taken out, whatever its shape:
// what is left names the cause, the same for every object it was about.
func TestNormaliseTakesOutEveryValue(t *testing.T) {
	cases := []struct{ name, msg, want string }{
		{"stripe event id", "apply event evt_1NG8Du2eZvKYlo2CUI79vXWy: boom", "apply event <id>: boom"},
		{"stripe id all letters", "apply event evt_bad: boom", "apply event <id>: boom"},
		{"hyphenated id", "apply event evt-123-abc: boom", "apply event <id>: boom"},
		{"plain number id", "apply event 42: boom", "apply event <id>: boom"},
		{"letters-only id after event", "apply event abcdefgh: boom", "apply event <id>: boom"},
		{"uuid", "purchase 3f2c0b9e-6a1d-4c3b-9f7e-2b8e1c0d5a4f not found", "purchase <id> not found"},
		{"upper-case uuid", "purchase 3F2C0B9E-6A1D-4C3B-9F7E-2B8E1C0D5A4F not found", "purchase <id> not found"},
		{"hex", "digest deadbeef0123 mismatch", "digest <id> mismatch"},
		{"connected account", "no route for acct_1032D82eZvKYlo2C", "no route for <id>"},
		{"schedule id", "schedule sub_sched_1Mr3YdLkdIwHu7ixjop3qtff ended", "schedule <id> ended"},
		{"plain numbers", "subscription has 3 periods and 12 items", "subscription has <n> periods and <n> items"},
		{"amount", "amount 12.50 exceeds 1,234.56", "amount <n> exceeds <n>"},
		{"currency amount", "charged $1,234.56 instead of €12", "charged <n> instead of <n>"},
		{"duration", "gave up after 1.5s and 300ms", "gave up after <n> and <n>"},
		{"percentage", "usage at 95% of the budget", "usage at <n> of the budget"},
		{"unix timestamp", "created 1764343845 is in the future", "created <n> is in the future"},
		{"date", "period 2026-11-28 is closed", "period <time> is closed"},
		{"rfc3339", "not before 2026-11-28T15:30:45Z", "not before <time>"},
		{"rfc3339 offset fraction", "not before 2026-11-28T15:30:45.123+01:00", "not before <time>"},
		{"go time", "lease held until 2026-11-28 15:30:45.123456 +0000 UTC by another", "lease held until <time> by another"},
		{"email", "no customer for jane.doe+test@example.com", "no customer for <email>"},
		{"double quoted", `unsupported currency "xyz"`, "unsupported currency <v>"},
		{"escaped double quotes", `bad value "a \"b\" c" here`, "bad value <v> here"},
		{"single quoted", "No such customer: 'cus_9xYz12345'", "No such customer: <v>"},
		{"backquoted", "column `amount_due` missing", "column <v> missing"},
		{"typographic quotes", "price “Gold plan” archived", "price <v> archived"},
		{"apostrophe is not a quote", "can't decode the object; it isn't an invoice", "can't decode the object; it isn't an invoice"},
		{"url", "GET https://hooks.example.com/a/b?c=1 answered 500", "GET <url> answered <n>"},
		{"host and port", "dial tcp 10.0.0.7:5432: refused", "dial tcp <id>: refused"},
		{"snake_case words stay", "code resource_missing for payment_intent.succeeded", "code resource_missing for payment_intent.succeeded"},
		{"words and case stay", "decode PaymentIntent: unexpected end", "decode PaymentIntent: unexpected end"},
		{"whitespace collapses", "a \t b\n\nc", "a b c"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, failcause.Normalise(tc.msg))
		})
	}
}

// Messages that differ only in their values share one cause (one
// incident), whatever the shape of the values.
func TestClassifyGroupsEquivalentMessages(t *testing.T) {
	groups := [][]string{
		{
			`apply event evt_1AbCdEf123456: event object cannot be processed: payment intent id "pi_1" is not a PaymentIntent id`,
			`apply event evt-not-stripe-7: event object cannot be processed: payment intent id "x" is not a PaymentIntent id`,
			`apply event 12345: event object cannot be processed: payment intent id "" is not a PaymentIntent id`,
			`apply event 0f8fad5b-d9cb-469f-a165-70867728950e: event object cannot be processed: payment intent id "i/d" is not a PaymentIntent id`,
			`apply event foo: event object cannot be processed: payment intent id 'weird value' is not a PaymentIntent id`,
		},
		{
			"charge of 1500 for jane@example.com on 2026-11-01 declined",
			"charge of 12.99 for bob.smith+x@corp.example.org on 2026-12-31 declined",
		},
		{
			"lease on account 7f3a9c held until 2026-11-28T10:00:00Z",
			"lease on account 00ab41 held until 2026-12-01T23:59:59.999+02:00",
		},
	}
	for _, g := range groups {
		want := failcause.Classify(g[0])
		require.True(t, strings.HasPrefix(want, "other:"), want)
		for _, msg := range g[1:] {
			assert.Equal(t, want, failcause.Classify(msg), msg)
		}
	}
}

// An unclassified cause is bounded in length, and cut only between words:
// never inside a word or a placeholder.
func TestClassifyNeverCutsMidWord(t *testing.T) {
	long := "apply event evt_1AbCdEf123456: event object cannot be processed: payment intent id \"pi_x\" is not a PaymentIntent id and the invoice names a subscription schedule whose phases overlap"
	c := failcause.Classify(long)
	require.True(t, strings.HasPrefix(c, "other:"), c)
	text := strings.TrimPrefix(c, "other:")
	assert.LessOrEqual(t, utf8.RuneCountInString(text), failcause.MaxText+1)
	require.True(t, strings.HasSuffix(text, "…"), "a cut cause says it was cut: %q", text)
	kept := strings.Fields(strings.TrimSuffix(text, "…"))
	full := strings.Fields(failcause.Normalise(long))
	require.Less(t, len(kept), len(full))
	for i, w := range kept {
		assert.Equal(t, full[i], w, "word %d of %q is whole", i, text)
	}
	// Short ones are whole, without the mark.
	assert.Equal(t, "other:subscription <id> has <n> periods", failcause.Classify("subscription sub_1AbcDEF has 3 periods"))
}

// Whatever the message, no digit survives (every number and id is taken
// out), and normalising twice changes nothing more.
func FuzzNormalise(f *testing.F) {
	for _, seed := range []string{
		"apply event evt_1AbC: payment intent id \"pi_1\" is not a PaymentIntent id",
		"charge of $1,234.56 for a@b.co on 2026-11-28T10:00:00Z declined after 1.5s",
		"dial tcp 10.0.0.7:5432: connect: connection refused",
		"it's 'quoted' and \"double \\\" escaped\" and `back` and “curly”",
		"unterminated \"quote 123",
		"x 3f2c0b9e-6a1d-4c3b-9f7e-2b8e1c0d5a4f y",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, msg string) {
		if !utf8.ValidString(msg) {
			t.Skip("error messages are UTF-8")
		}
		once := failcause.Normalise(msg)
		assert.Equal(t, once, failcause.Normalise(once), "idempotent")
		if !strings.ContainsAny(msg, `"'`+"`“‘") { // an unterminated quote keeps what follows it
			assert.False(t, strings.ContainsFunc(once, func(r rune) bool { return r >= '0' && r <= '9' }), "no digit left in %q", once)
		}
	})
}
