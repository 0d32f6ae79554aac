package store

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// unit is one step of a text: a rune, or one byte that is not UTF-8 (a
// byte b is the negative -1-b, never equal to a rune).
type unit struct {
	r     rune
	bytes string
}

func units(s string) []unit {
	var out []unit
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && n == 1 {
			r = -1 - rune(s[0])
		}
		out = append(out, unit{r, s[:n]})
		s = s[n:]
	}
	return out
}

// sameFold is the oracle's case-insensitive equality of two units:
// identical, or two runes strings.EqualFold calls equal.
func sameFold(a, b unit) bool {
	if a.r < 0 || b.r < 0 {
		return a.r == b.r
	}
	return strings.EqualFold(a.bytes, b.bytes)
}

// referenceReplaceFold is the oracle: it walks the text unit by unit and
// replaces, leftmost first, every window of as many units as old that
// equals old case-insensitively. It also answers which units were matched.
func referenceReplaceFold(s, old, repl string) (string, []bool) {
	su, ou := units(s), units(old)
	matched := make([]bool, len(su))
	if len(ou) == 0 {
		return s, matched
	}
	var b strings.Builder
	for i := 0; i < len(su); {
		ok := i+len(ou) <= len(su)
		for j := 0; ok && j < len(ou); j++ {
			ok = sameFold(su[i+j], ou[j])
		}
		if !ok {
			b.WriteString(su[i].bytes)
			i++
			continue
		}
		b.WriteString(repl)
		for j := range ou {
			matched[i+j] = true
		}
		i += len(ou)
	}
	return b.String(), matched
}

// containsFold reports whether s holds old case-insensitively, by the
// oracle's equality.
func containsFoldRef(s, old string) bool {
	_, matched := referenceReplaceFold(s, old, "")
	for _, m := range matched {
		if m {
			return true
		}
	}
	return false
}

func TestReplaceFold(t *testing.T) {
	tests := []struct{ s, old, want string }{
		{"mail to A@B.c failed", "a@b.C", "mail to [x] failed"},
		{"İİ a@b.c", "a@b.c", "İİ [x]"},                // İ lower-cases to a shorter "i"
		{"İa@b.c and İa@b.c", "İA@B.C", "[x] and [x]"}, // the needle holds it
		{"ẞ x@y.z", "X@Y.Z", "ẞ [x]"},                  // ẞ lower-cases to a shorter ß
		{"Ka@b.c", "ka@b.c", "[x]"},                    // Kelvin sign folds to k
		{"ſ@s.s", "S@S.S", "[x]"},                      // long s folds to s
		{"Ⱥx@y.z", "x@y.z", "Ⱥ[x]"},                    // Ⱥ lower-cases to a longer ⱥ
		{"no match here", "a@b.c", "no match here"},
		{"a@b.ca@b.c", "A@B.C", "[x][x]"},
		{"\xffa@b.c\xfe", "a@b.c", "\xff[x]\xfe"},
		{"\xff", "\xfe", "\xff"}, // bytes that are not UTF-8 match only themselves
		{"abc", "", "abc"},
	}
	for _, tc := range tests {
		got := replaceFold(tc.s, tc.old, "[x]")
		if got != tc.want {
			t.Errorf("replaceFold(%q, %q) = %q, want %q", tc.s, tc.old, got, tc.want)
		}
	}
}

// FuzzReplaceFold: replaceFold agrees with a unit-by-unit reference, keeps
// every byte outside the matches, and leaves no case-insensitive occurrence
// of the needle behind (the replacement shares no letter with it).
func FuzzReplaceFold(f *testing.F) {
	for _, seed := range [][2]string{
		{"İİ a@b.c", "a@b.c"}, {"ẞ x@y.z ẞ", "X@Y.Z"}, {"\u212aa@b.c", "ka@b.c"}, {"İa@b.c", "İA@B.C"},
		{"ſ@s.s", "S@S.S"}, {"ȺȺx@y.z", "x@y.z"}, {"\xffa@b.c", "a@b.c"}, {"aaa", "aa"}, {"", "a"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, s, old string) {
		if old == "" {
			if got := replaceFold(s, old, "#"); got != s {
				t.Fatalf("an empty needle changed %q into %q", s, got)
			}
			return
		}
		// A replacement no unit of old folds to, so that it cannot make a
		// new occurrence.
		repl := ""
		for _, r := range "#%~\u2603\U0001F512" {
			if !containsFoldRef(old, string(r)) {
				repl = string(r)
				break
			}
		}
		if repl == "" {
			t.Skip("the needle holds every candidate replacement")
		}
		got := replaceFold(s, old, repl)
		want, matched := referenceReplaceFold(s, old, repl)
		if got != want {
			t.Fatalf("replaceFold(%q, %q) = %q, reference %q", s, old, got, want)
		}
		var kept strings.Builder
		for i, u := range units(s) {
			if !matched[i] {
				kept.WriteString(u.bytes)
			}
		}
		if strings.ReplaceAll(got, repl, "") != strings.ReplaceAll(kept.String(), repl, "") {
			t.Fatalf("bytes outside the matches changed: %q from %q", got, s)
		}
		if containsFoldRef(got, old) {
			t.Fatalf("replaceFold(%q, %q) = %q still holds the needle", s, old, got)
		}
	})
}
