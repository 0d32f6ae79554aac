package main

import (
	"runtime/debug"
	"strings"
)

// version and commit are set at link time (scripts/image.sh:
// -ldflags "-X main.version=v1.2.3 -X main.commit=<sha>"); else the build's
// VCS stamp says which commit this is.
var version, commit = "", ""

// versionString is "stripe-payments <version> (<commit>[, modified], <go>)".
func versionString() string {
	v, rev, modified, goVersion := version, "", false, ""
	if info, ok := debug.ReadBuildInfo(); ok {
		goVersion = info.GoVersion
		if v == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			v = info.Main.Version
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if commit != "" {
		rev = commit
	}
	if v == "" {
		v = "devel"
	}
	var extra []string
	if rev != "" {
		extra = append(extra, "commit "+rev[:min(12, len(rev))])
	}
	if modified {
		extra = append(extra, "modified")
	}
	if goVersion != "" {
		extra = append(extra, goVersion)
	}
	if len(extra) == 0 {
		return "stripe-payments " + v
	}
	return "stripe-payments " + v + " (" + strings.Join(extra, ", ") + ")"
}
