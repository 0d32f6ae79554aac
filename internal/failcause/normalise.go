package failcause

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxText bounds the text of an unclassified cause (in runes); a
// longer one is cut between words and ends with "…".
const MaxText = 160

// The placeholders Normalise puts where a value was.
const (
	phID    = "<id>"
	phNum   = "<n>"
	phValue = "<v>"
	phEmail = "<email>"
	phTime  = "<time>"
	phURL   = "<url>"
)

var (
	urls   = regexp.MustCompile(`\b[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>]+`)
	emails = regexp.MustCompile(`[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}`)
	// A date, with an optional time of day and zone: RFC 3339 and Go's
	// time.Time.String().
	times = regexp.MustCompile(`\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2}| [+-]\d{4}(?: [A-Z]{2,5})?)?)?`)
	uuids = regexp.MustCompile(`\b[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}\b`)

	// A number: an amount, a count, a duration, a percentage.
	number = regexp.MustCompile(`^[-+]?[$€£¥]?\d[\d,]*(?:\.\d+)?(?:%|[a-zµ]{1,3})?$`)
	// A Stripe id (or one of this service's, shaped the same), whatever
	// follows its prefix: evt_bad is an event id too.
	knownPrefix = regexp.MustCompile(`^(?:evt|cus|sub|sub_sched|pi|ch|in|ii|il|si|acct|pm|price|prod|re|txn|seti|src|py|po|tr|cs|req|whsec|inc|rpl|rec|clock|pur)_\S+$`)
	// Any other prefix_ whose tail has a capital: a Stripe-shaped id, not
	// a snake_case word.
	idShaped    = regexp.MustCompile(`^[a-z]+(?:_[a-z]+)*_[A-Za-z]*[A-Z][A-Za-z]*$`)
	placeholder = regexp.MustCompile(`^<[a-z]+>$`)
)

// Normalise replaces every value in an error message with a placeholder:
// quoted values (<v>), URLs (<url>), email addresses (<email>), dates and
// times (<time>), numbers and amounts (<n>), and ids of any shape (<id>:
// Stripe's, UUIDs, hex, anything with a digit, and whatever names the
// event in "event X:"). Two failures that differ only in the objects they
// were about normalise to the same text.
func Normalise(msg string) string {
	s := replaceQuoted(msg)
	s = urls.ReplaceAllStringFunc(s, func(u string) string {
		// A sentence's punctuation after a URL is not part of it.
		trimmed := strings.TrimRight(u, ".,;:)]}")
		return phURL + u[len(trimmed):]
	})
	s = emails.ReplaceAllString(s, phEmail)
	s = times.ReplaceAllString(s, phTime)
	s = uuids.ReplaceAllString(s, phID)
	words := strings.Fields(s)
	for i, w := range words {
		core, lead, trail := trimPunct(w)
		if core == "" || placeholder.MatchString(core) {
			continue
		}
		var prev string
		if i > 0 {
			prev, _, _ = trimPunct(words[i-1])
		}
		if r := valueOf(core, prev, trail); r != "" {
			words[i] = lead + r + trail
		}
	}
	return strings.Join(words, " ")
}

// valueOf is the placeholder for one word (without its punctuation), or ""
// when it is a word and stays.
func valueOf(core, prev, trail string) string {
	switch {
	case strings.EqualFold(prev, "event") && strings.HasPrefix(trail, ":"):
		// "apply event X: …": X names the event, whatever its shape.
		return phID
	case number.MatchString(core):
		return phNum
	case strings.ContainsFunc(core, unicode.IsDigit),
		knownPrefix.MatchString(core),
		idShaped.MatchString(core):
		return phID
	}
	return ""
}

// trimPunct splits a word into its leading brackets, its core and its
// trailing punctuation.
func trimPunct(w string) (core, lead, trail string) {
	core = strings.TrimLeft(w, "([{")
	lead = w[:len(w)-len(core)]
	c := strings.TrimRight(core, ")]},;:.!?")
	trail = core[len(c):]
	return c, lead, trail
}

// quotes pairs each opening quote with its closing one.
var quotes = map[rune]rune{'"': '"', '`': '`', '“': '”', '‘': '’', '\'': '\''}

// replaceQuoted replaces every quoted value with <v>. A ' between two
// letters is an apostrophe (can't), not a quote.
func replaceQuoted(s string) string {
	var b strings.Builder
	prev := ' '
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		closeQ, isQuote := quotes[r]
		if isQuote && r == '\'' && isWordRune(prev) {
			isQuote = false
		}
		if !isQuote {
			b.WriteRune(r)
			prev = r
			i += n
			continue
		}
		end := closing(s, i+n, closeQ)
		if end < 0 {
			b.WriteRune(r)
			prev = r
			i += n
			continue
		}
		b.WriteString(phValue)
		prev = '>'
		i = end
	}
	return b.String()
}

// closing is the index just past the quote closing one that opened before
// from, or -1: a backslash escapes the next rune; a closing ' must not be
// followed by a letter (it would be an apostrophe).
func closing(s string, from int, q rune) int {
	for j := from; j < len(s); {
		r, n := utf8.DecodeRuneInString(s[j:])
		switch {
		case r == '\\' && q != '`':
			j += n
			if j < len(s) {
				_, m := utf8.DecodeRuneInString(s[j:])
				j += m
			}
			continue
		case r == q:
			next, _ := utf8.DecodeRuneInString(s[j+n:])
			if q == '\'' && j+n < len(s) && isWordRune(next) {
				break
			}
			return j + n
		}
		j += n
	}
	return -1
}

func isWordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

// cutWords bounds s to max runes, cutting between words and marking the
// cut with "…".
func cutWords(s string, max int) string {
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	cut, runes := 0, 0
	for i, r := range s {
		if runes > max {
			break
		}
		if r == ' ' {
			cut = i
		}
		runes++
	}
	if cut == 0 {
		// One word longer than max: keep it whole rather than cut it.
		if i := strings.IndexByte(s, ' '); i > 0 {
			cut = i
		} else {
			return s
		}
	}
	return s[:cut] + "…"
}
