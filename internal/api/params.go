package api

import (
	"net/url"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
)

// Pagination limits of every list endpoint (docs/design.md §4).
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// List is the JSON shape of every list answer; next_cursor is "" on the
// last page.
type List[T any] struct {
	Data       []T    `json:"data"`
	NextCursor string `json:"next_cursor"`
}

// requestParams is queryParams on the request's query string, parsed
// strictly: a malformed pair (a bad %-escape, a ';') is a 400 too, where
// echo's QueryParams would drop it silently.
func requestParams(c echo.Context, allowed ...string) (map[string]string, error) {
	q, err := url.ParseQuery(c.Request().URL.RawQuery)
	if err != nil {
		return nil, apperr.Invalid("malformed query string")
	}
	return queryParams(q, allowed...)
}

// listOf renders a page of items as a List.
func listOf[T, J any](items []T, next string, render func(T) J) List[J] {
	out := List[J]{Data: make([]J, 0, len(items)), NextCursor: next}
	for _, it := range items {
		out.Data = append(out.Data, render(it))
	}
	return out
}

// queryParams validates a query string against the parameters a route
// accepts: an unknown or repeated parameter is a 400, never silently ignored.
func queryParams(q url.Values, allowed ...string) (map[string]string, error) {
	ok := map[string]bool{}
	for _, a := range allowed {
		ok[a] = true
	}
	out := make(map[string]string, len(q))
	for k, v := range q {
		if !ok[k] {
			return nil, apperr.Invalid("unknown parameter %q", k)
		}
		if len(v) != 1 {
			return nil, apperr.Invalid("parameter %q given more than once", k)
		}
		out[k] = v[0]
	}
	return out, nil
}

// pageLimit parses `limit`: default 100, 1 to 1000.
func pageLimit(raw string) (int32, error) {
	if raw == "" {
		return DefaultLimit, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 || n > MaxLimit {
		return 0, apperr.Invalid("limit must be an integer from 1 to %d", MaxLimit)
	}
	return int32(n), nil
}

// pageOf reads a list's limit (pageLimit) and, when given, its cursor
// through decode (each list has its own cursor).
func pageOf[C any](q map[string]string, decode func(string) (C, error)) (int32, C, error) {
	var after C
	limit, err := pageLimit(q["limit"])
	if err != nil {
		return 0, after, err
	}
	if raw, given := q["cursor"]; given {
		if after, err = decode(raw); err != nil {
			return 0, after, err
		}
	}
	return limit, after, nil
}
