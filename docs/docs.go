// Package docs embeds the operator documentation and runbooks, so the
// console links an incident to the runbook of the version it runs.
package docs

import "embed"

// FS holds docs/*.md and docs/runbooks/*.md.
//
//go:embed *.md runbooks/*.md
var FS embed.FS
