// Package docscheck holds no code: its tests keep the documentation a
// newcomer walks through honest. The README stays short and its map of
// docs/ names exactly the pages there; every relative link in the README and
// docs/ reaches a file; every Prometheus alert has a runbook page that names
// it, so a reader following any of them lands somewhere true.
package docscheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/stripe-payments/stripe-payments/internal/retention"
)

const (
	readmeMaxLines = 250
	mapHeading     = "## Documentation" // the README section that maps docs/
	alertsFile     = "monitoring/prometheus/alerts.yml"
	runbooksDir    = "docs/runbooks"
)

// repoRoot is the module root: tests run in their package's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "go.mod not found above the test's directory")
		dir = parent
	}
}

// mdLink matches an inline Markdown link or image target.
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// link is a relative link: a path (empty: the same page) and an anchor.
type link struct{ path, anchor string }

// links returns the relative links in text (not URLs); fenced code is
// skipped, since a link there is only text.
func links(text string) []link {
	var out []link
	for _, m := range mdLink.FindAllStringSubmatch(withoutCode(text), -1) {
		target := m[1]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		path, anchor, _ := strings.Cut(target, "#")
		out = append(out, link{path: path, anchor: anchor})
	}
	return out
}

// withoutCode blanks fenced code blocks and inline code spans.
func withoutCode(text string) string {
	var b strings.Builder
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			b.WriteString("\n")
			continue
		}
		if fenced {
			b.WriteString("\n")
			continue
		}
		b.WriteString(inlineCode.ReplaceAllString(line, "``") + "\n")
	}
	return b.String()
}

var (
	inlineCode = regexp.MustCompile("`[^`]*`")
	// GitHub drops from a heading's anchor every character that is not a
	// letter, a digit, a space, '-' or '_', and turns spaces into '-'.
	notInSlug = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
)

// anchors returns the anchors GitHub gives the headings of a Markdown page.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range strings.Split(withoutFences(text), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		slug := strings.ReplaceAll(notInSlug.ReplaceAllString(strings.ToLower(title), ""), " ", "-")
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

// withoutFences blanks fenced code blocks only (a '#' line there is a comment).
func withoutFences(text string) string {
	var b strings.Builder
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		}
		if fenced {
			line = ""
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// section returns the lines of text under heading, up to the next heading
// of the same or a higher level.
func section(text, heading string) (string, bool) {
	level := strings.IndexByte(heading, ' ')
	var b strings.Builder
	in := false
	for _, line := range strings.Split(text, "\n") {
		if in && strings.HasPrefix(line, "#") {
			if n := len(line) - len(strings.TrimLeft(line, "#")); n <= level {
				break
			}
		}
		if line == heading {
			in = true
			continue
		}
		if in {
			b.WriteString(line + "\n")
		}
	}
	return b.String(), in
}

// README holds what the front door needs and no more (≤ 250 lines), so a
// newcomer reads it whole.
func TestREADMEIsShort(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	require.NoError(t, err)
	lines := strings.Count(string(readme), "\n")
	require.LessOrEqual(t, lines, readmeMaxLines,
		"README.md has %d lines; keep it at most %d and move the rest into docs/", lines, readmeMaxLines)
}

// The README's map of docs/ and the pages there agree both ways.
func TestREADMEMapsEveryDocsPage(t *testing.T) {
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	docsMap, ok := section(string(readme), mapHeading)
	require.True(t, ok, "README.md has no %q section (the map of docs/)", mapHeading)

	mapped := map[string]bool{}
	for _, l := range links(docsMap) {
		if l.path != "" {
			mapped[filepath.Clean(l.path)] = true
		}
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, pages, "docs/ has no pages")
	var want []string
	for _, p := range pages {
		want = append(want, filepath.ToSlash(filepath.Join("docs", filepath.Base(p))))
	}
	want = append(want, runbooksDir)

	var missing, extra []string
	for _, w := range want {
		if !mapped[w] {
			missing = append(missing, w)
		}
	}
	for m := range mapped {
		if !strings.HasPrefix(m, "docs") {
			continue // the map may also point at RELIABILITY.md and BENCHMARKS.md
		}
		if _, err := os.Stat(filepath.Join(root, m)); err != nil {
			extra = append(extra, m)
		}
	}
	sort.Strings(extra)
	require.Empty(t, missing, "pages in docs/ the README's %q map does not name", mapHeading)
	require.Empty(t, extra, "the README's %q map names pages that do not exist", mapHeading)
}

// Every relative link in the README and docs/ reaches a file, and a link to
// a heading of a Markdown page reaches that heading, so a page or a section
// that moves cannot leave a dead link behind.
func TestRelativeLinksReachAFile(t *testing.T) {
	root := repoRoot(t)
	files := []string{filepath.Join(root, "README.md"), filepath.Join(root, "RELIABILITY.md"), filepath.Join(root, "BENCHMARKS.md")}
	for _, pattern := range []string{"docs/*.md", "docs/runbooks/*.md"} {
		found, err := filepath.Glob(filepath.Join(root, pattern))
		require.NoError(t, err)
		files = append(files, found...)
	}
	var dead []string
	for _, f := range files {
		text, err := os.ReadFile(f)
		require.NoError(t, err)
		rel, _ := filepath.Rel(root, f)
		for _, l := range links(string(text)) {
			target := f
			if l.path != "" {
				target = filepath.Join(filepath.Dir(f), l.path)
			}
			info, err := os.Stat(target)
			if err != nil {
				dead = append(dead, fmt.Sprintf("%s → %s", rel, l.path))
				continue
			}
			if l.anchor == "" || info.IsDir() || !strings.HasSuffix(target, ".md") {
				continue
			}
			page, err := os.ReadFile(target)
			require.NoError(t, err)
			if !anchors(string(page))[l.anchor] {
				dead = append(dead, fmt.Sprintf("%s → %s#%s (no such heading)", rel, l.path, l.anchor))
			}
		}
	}
	require.Empty(t, dead, "relative links that reach no file")
}

// directRequires returns the modules go.mod requires directly.
func directRequires(gomod string) []string {
	var out []string
	block := false
	for _, line := range strings.Split(gomod, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "require (":
			block = true
			continue
		case block && line == ")":
			block = false
			continue
		case strings.HasPrefix(line, "require "):
			line = strings.TrimPrefix(line, "require ")
		case !block:
			continue
		}
		if line == "" || strings.HasPrefix(line, "//") || strings.Contains(line, "// indirect") {
			continue
		}
		out = append(out, strings.Fields(line)[0])
	}
	return out
}

// The project's rule: every direct dependency has its line in the README's
// "## Dependencies" section saying why (a line may name a module's parent,
// e.g. the AWS SDK for its service modules, or the package used, e.g.
// golang.org/x/time/rate).
func TestEveryDirectDependencyHasItsLine(t *testing.T) {
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	deps, ok := section(string(readme), "## Dependencies")
	require.True(t, ok, "README.md has no \"## Dependencies\" section")
	named := regexp.MustCompile("`([a-z0-9.-]+\\.[a-z]+/[^`\\s]+)`").FindAllStringSubmatch(deps, -1)
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	mods := directRequires(string(gomod))
	require.NotEmpty(t, mods, "go.mod requires nothing directly?")

	var missing []string
	for _, mod := range mods {
		found := false
		for _, n := range named {
			if mod == n[1] || strings.HasPrefix(mod, n[1]+"/") || strings.HasPrefix(n[1], mod+"/") {
				found = true
				break
			}
		}
		if !found {
			missing = append(missing, mod)
		}
	}
	require.Empty(t, missing, "direct dependencies of go.mod without their line in the README's Dependencies table")
}

type rules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// Every alert carries a runbook_url that is its own page in docs/runbooks,
// that page names the alert, and no page is left without its alert.
func TestEveryAlertHasItsRunbook(t *testing.T) {
	root := repoRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, alertsFile))
	require.NoError(t, err)
	var r rules
	require.NoError(t, yaml.Unmarshal(raw, &r), alertsFile)

	alerts := map[string]bool{}
	var problems []string
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			if rule.Alert == "" {
				continue // a recording rule
			}
			alerts[rule.Alert] = true
			url := rule.Annotations["runbook_url"]
			want := runbooksDir + "/" + rule.Alert + ".md"
			switch {
			case url == "":
				problems = append(problems, fmt.Sprintf("%s: no runbook_url annotation (want %q)", rule.Alert, want))
				continue
			case url != want:
				problems = append(problems, fmt.Sprintf("%s: runbook_url %q, want its own page %q", rule.Alert, url, want))
				continue
			}
			page, err := os.ReadFile(filepath.Join(root, url))
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: runbook_url %q: %v", rule.Alert, url, err))
				continue
			}
			if !strings.Contains(string(page), rule.Alert) {
				problems = append(problems, fmt.Sprintf("%s: its runbook %s never names it", rule.Alert, url))
			}
		}
	}
	require.NotEmpty(t, alerts, "%s holds no alert", alertsFile)

	pages, err := filepath.Glob(filepath.Join(root, runbooksDir, "*.md"))
	require.NoError(t, err)
	for _, p := range pages {
		if name := strings.TrimSuffix(filepath.Base(p), ".md"); !alerts[name] {
			problems = append(problems, fmt.Sprintf("%s/%s.md: no alert of that name in %s", runbooksDir, name, alertsFile))
		}
	}
	require.Empty(t, problems)
}

// operationsPage holds the runbook index: one table row per alert.
const operationsPage = "docs/operations.md"

// indexRow matches a row of the runbook index:
// | [`Alert`](runbooks/Alert.md) | severity | summary |
var indexRow = regexp.MustCompile("^\\| \\[`([A-Za-z]+)`\\]\\(runbooks/([A-Za-z]+)\\.md\\) \\| ([a-z]+) \\|")

// The runbook index in docs/operations.md lists exactly the alerts of
// alerts.yml, once each, with the severity the rule carries and a link to
// its own page: an operator reading the index sees every alert that can
// page them, and none that cannot.
func TestRunbookIndexListsEveryAlert(t *testing.T) {
	root := repoRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, alertsFile))
	require.NoError(t, err)
	var r rules
	require.NoError(t, yaml.Unmarshal(raw, &r), alertsFile)
	severity := map[string]string{}
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			if rule.Alert != "" {
				severity[rule.Alert] = rule.Labels["severity"]
			}
		}
	}
	require.NotEmpty(t, severity, "%s holds no alert", alertsFile)

	page, err := os.ReadFile(filepath.Join(root, operationsPage))
	require.NoError(t, err)
	listed := map[string]int{}
	var problems []string
	for _, line := range strings.Split(string(page), "\n") {
		m := indexRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		alert, target, sev := m[1], m[2], m[3]
		listed[alert]++
		want, ok := severity[alert]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s lists %s, which %s does not define", operationsPage, alert, alertsFile))
		case target != alert:
			problems = append(problems, fmt.Sprintf("%s: %s links to runbooks/%s.md", operationsPage, alert, target))
		case sev != want:
			problems = append(problems, fmt.Sprintf("%s: %s listed as %q, the rule says %q", operationsPage, alert, sev, want))
		}
	}
	for alert := range severity {
		switch n := listed[alert]; {
		case n == 0:
			problems = append(problems, fmt.Sprintf("%s: the runbook index misses %s", operationsPage, alert))
		case n > 1:
			problems = append(problems, fmt.Sprintf("%s: the runbook index lists %s %d times", operationsPage, alert, n))
		}
	}
	sort.Strings(problems)
	require.Empty(t, problems)
}

// The architecture page's retention paragraph names every table that
// internal/retention prunes, so an operator looking for where rows go
// finds each one there.
func TestArchitectureNamesEveryPrunedTable(t *testing.T) {
	root := repoRoot(t)
	page, err := os.ReadFile(filepath.Join(root, "docs/architecture.md"))
	require.NoError(t, err)
	_, para, found := strings.Cut(string(page), "`internal/retention` deletes old rows of")
	require.True(t, found, "docs/architecture.md has no retention paragraph")
	para, _, _ = strings.Cut(para, "\n\n")
	var missing []string
	for _, r := range retention.Rules(time.Hour, time.Hour, time.Hour) {
		if !strings.Contains(para, "`"+r.Table+"`") {
			missing = append(missing, r.Table)
		}
	}
	require.Empty(t, missing, "docs/architecture.md's retention paragraph misses these pruned tables")
}
