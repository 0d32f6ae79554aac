package ops

import (
	"errors"
	"io/fs"
	"net/http"
	"regexp"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/docs"
)

// docPathRe is a page of docs/ or docs/runbooks/, the only files served.
var docPathRe = regexp.MustCompile(`^(runbooks/)?[A-Za-z0-9-]+\.md$`)

// runbookHref is where the console serves a docs page named by its path
// from the repository's root ("docs/runbooks/X.md").
func runbookHref(path string) string {
	return Prefix + "/" + path
}

// runbookName is a docs page's file name without its directory and
// extension.
func runbookName(path string) string {
	name := path[strings.LastIndexByte(path, '/')+1:]
	return strings.TrimSuffix(name, ".md")
}

type docData struct {
	Path, Text string
}

// docPage shows a docs page (a runbook) as its Markdown source, which
// reads as text: the console links each incident to what to do.
func (c *Console) docPage(ec echo.Context) error {
	p := ec.Param("*")
	if !docPathRe.MatchString(p) {
		return c.fail(ec, http.StatusNotFound, "No such page in docs/.")
	}
	b, err := fs.ReadFile(docs.FS, p)
	if errors.Is(err, fs.ErrNotExist) {
		return c.fail(ec, http.StatusNotFound, "No such page in docs/.")
	}
	if err != nil {
		return c.unavailable(ec, "read the page", err)
	}
	return c.render(ec, http.StatusOK, "doc", view{Title: "docs/" + p, Nav: "incidents", Data: docData{Path: "docs/" + p, Text: string(b)}})
}
