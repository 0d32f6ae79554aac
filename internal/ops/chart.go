package ops

import (
	"fmt"
	"html/template"
	"math"
	"net/url"
	"strings"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/incidents"
	"github.com/stripe-payments/stripe-payments/internal/opsdata"
)

// Colours of the outcomes: the Okabe–Ito palette, told apart with any
// colour vision, each also named in the legend and in every bar's title.
var outcomeColours = map[string]string{
	"applied":   "#009E73",
	"duplicate": "#56B4E9",
	"ignored":   "#8C8C8C",
	"rejected":  "#E69F00",
	"failed":    "#D55E00",
}

// chart is a stacked bar chart of events per hour, drawn as SVG on the
// server: no script, nothing to load.
type chart struct {
	Width, Height float64
	Bars          []bar
	Ticks         []tick
	Labels        []tick
	Max           int64
	Hours         []opsdata.Hour
}

type bar struct {
	X, W  float64
	Href  string
	Title string
	Parts []part
}

type part struct {
	Y, H   float64
	Colour string
}

type tick struct {
	X, Y  float64
	Label string
}

const (
	chartW, chartH                = 960.0, 260.0
	padL, padR, padTop, padBottom = 48.0, 8.0, 10.0, 34.0
)

func newChart(hours []opsdata.Hour) chart {
	c := chart{Width: chartW, Height: chartH, Hours: hours}
	for _, h := range hours {
		c.Max = max(c.Max, h.Total())
	}
	top := niceCeil(c.Max)
	plotH := chartH - padTop - padBottom
	slot := (chartW - padL - padR) / float64(max(1, len(hours)))
	for i, h := range hours {
		b := bar{X: padL + float64(i)*slot + 1, W: math.Max(1, slot-2)}
		y := chartH - padBottom
		var words []string
		for _, o := range opsdata.Outcomes {
			n := h.Counts[o]
			if n == 0 {
				continue
			}
			ph := float64(n) / float64(top) * plotH
			y -= ph
			b.Parts = append(b.Parts, part{Y: y, H: ph, Colour: outcomeColours[o]})
			words = append(words, fmt.Sprintf("%d %s", n, o))
		}
		if len(words) == 0 {
			words = []string{"no events"}
		}
		start := h.Start.UTC()
		b.Title = start.Format("Jan 2 15:00") + "–" + start.Add(time.Hour).Format("15:00") + " UTC: " + strings.Join(words, ", ")
		b.Href = Prefix + "/events?" + url.Values{"by": {"date"}, "date": {start.Format("2006-01-02")},
			"from": {start.Format("15:04")}, "to": {start.Format("15") + ":59"}}.Encode()
		c.Bars = append(c.Bars, b)
		if start.Hour()%6 == 0 {
			label := start.Format("15:00")
			if start.Hour() == 0 {
				label = start.Format("Jan 2")
			}
			c.Labels = append(c.Labels, tick{X: b.X + b.W/2, Y: chartH - padBottom + 16, Label: label})
		}
	}
	for i := 0; i <= 4; i++ {
		v := top * int64(i) / 4
		c.Ticks = append(c.Ticks, tick{X: padL - 6, Y: chartH - padBottom - float64(v)/float64(top)*plotH, Label: fmt.Sprint(v)})
	}
	return c
}

// niceCeil rounds up to four times a 1, 2 or 5 step, so the four
// gridlines land on round numbers.
func niceCeil(v int64) int64 {
	if v <= 4 {
		return 4
	}
	need := (v + 3) / 4
	for p := int64(1); ; p *= 10 {
		for _, m := range []int64{1, 2, 5} {
			if m*p >= need {
				return 4 * m * p
			}
		}
	}
}

var funcs = template.FuncMap{
	"colour": func(o string) string { return outcomeColours[o] },
	"time": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"date": func(d interface{ IsZero() bool }) string {
		if d.IsZero() {
			return "—"
		}
		return fmt.Sprint(d)
	},
	"minute": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04") },
	"age":    age,
	"money": func(amount int64, currency string) string {
		return fmt.Sprintf("%d.%02d %s", amount/100, amount%100, strings.ToUpper(currency))
	},
	"path":        url.PathEscape,
	"guide":       incidents.Describe,
	"runbookHref": runbookHref,
	"runbookName": runbookName,
	"subPath":     subPath,
	"clockPath":   clockPath,
	"unresolved":  func(r opsdata.Run) int { return r.Unresolved() },
	"charges":     func(r opsdata.RunReport) int { return r.Succeeded + r.Processing + r.Declined },
	"statusClass": func(s string) string {
		switch s {
		case "processed", "COMPLETED", "ACTIVE", "applied", "completed", "duplicate", "ready":
			return "ok"
		case "failed", "ERROR", "rejected", "CANCELLED", "STALE", "internal_failure":
			return "bad"
		case "PAUSED", "ACHSENT", "SCHEDULED", "received", "advancing":
			return "warn"
		}
		return ""
	},
	"inc": func(n int) int { return n + 1 },
	"seq": func(n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = i + 1
		}
		return out
	},
}

// age renders a duration the way an operator reads it.
func age(d time.Duration) string {
	switch {
	case d < 0:
		return "—"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
