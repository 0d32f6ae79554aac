// Package httpserver hosts the echo instance: error mapping, request logging
// and metrics, health endpoints, listen and graceful shutdown. Route owners
// (webhook, api) register themselves on it.
package httpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/metrics"
)

// Check is one readiness probe (DynamoDB, Postgres).
type Check struct {
	Name string
	Run  func(ctx context.Context) error
}

// Server is the service's HTTP server.
type Server struct {
	Echo     *echo.Echo
	log      *slog.Logger
	listener net.Listener
	server   *http.Server
	done     chan error
}

// New returns the admin server (docs/design.md §3 "Two listeners"): /healthz,
// /readyz and /metrics are registered; the console and the APIs register
// themselves on it.
func New(log *slog.Logger, m *metrics.Metrics, checks []Check) *Server {
	s := newServer(log, m)
	e := s.Echo
	e.GET("/readyz", func(c echo.Context) error {
		ctx, cancel := context.WithTimeout(c.Request().Context(), 3*time.Second)
		defer cancel()
		result := map[string]string{}
		ready := true
		for _, check := range checks {
			if err := check.Run(ctx); err != nil {
				log.Warn("readiness check failed", "check", check.Name, "error", err)
				result[check.Name] = "unavailable"
				ready = false
				continue
			}
			result[check.Name] = "ok"
		}
		status := http.StatusOK
		if !ready {
			status = http.StatusServiceUnavailable
		}
		return c.JSON(status, result)
	})
	e.GET("/metrics", echo.WrapHandler(m.Handler()))
	return s
}

// NewPublic returns the public server (docs/design.md §3 "Two listeners"): only
// /healthz here; the webhook registers itself on it, and nothing else may.
func NewPublic(log *slog.Logger, m *metrics.Metrics) *Server {
	return newServer(log, m)
}

func newServer(log *slog.Logger, m *metrics.Metrics) *Server {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	s := &Server{Echo: e, log: log}
	e.HTTPErrorHandler = s.handleError
	// The client's address is the connection's unless TrustProxies names
	// the proxies whose X-Forwarded-For is believed (echo's default would
	// believe any client's header).
	e.IPExtractor = echo.ExtractIPDirect()
	// observe is outermost, so a recovered panic is counted as the 500 it
	// answers.
	e.Use(s.observe(m), s.recoverPanics(m))
	e.GET("/healthz", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
	})
	return s
}

// TrustProxies makes the client address (echo.Context.RealIP) the last
// X-Forwarded-For entry that is not one of proxies, when the connection
// comes from one of them; else the connection's address. No proxy: the
// header is never believed.
func (s *Server) TrustProxies(proxies []netip.Prefix) {
	if len(proxies) == 0 {
		s.Echo.IPExtractor = echo.ExtractIPDirect()
		return
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, p := range proxies {
		ipnet := &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
		opts = append(opts, echo.TrustIPRange(ipnet))
	}
	s.Echo.IPExtractor = echo.ExtractIPFromXFFHeader(opts...)
}

// Open listens on addr ("127.0.0.1:0" picks a free port) and serves in the
// background.
func (s *Server) Open(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	s.listener = ln
	s.server = &http.Server{
		Handler:           s.Echo,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.done = make(chan error, 1)
	go func() {
		err := s.server.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.done <- err
	}()
	return nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.listener.Addr().String() }

// URL is the server's base URL.
func (s *Server) URL() string { return "http://" + s.Addr() }

// Done is closed with the serve error when the server stops.
func (s *Server) Done() <-chan error { return s.done }

// Close stops accepting connections and waits for in-flight requests until
// ctx ends.
func (s *Server) Close(ctx context.Context) error {
	if s.server == nil {
		return nil
	}
	if err := s.server.Shutdown(ctx); err != nil {
		return fmt.Errorf("shutdown http server: %w", err)
	}
	return nil
}

// handleError is the one place that maps errors to HTTP answers.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var (
		status int
		body   apperr.Body
	)
	var he *echo.HTTPError
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		// A body limit hit while a handler (or echo's binder) was reading.
		err = apperr.Wrap(err, apperr.CodePayloadTooLarge, "request body over %d bytes", tooLarge.Limit)
	}
	if errors.As(err, &he) && tooLarge == nil {
		status = he.Code
		body.Error = apperr.BodyError{Code: echoCode(he.Code), Message: fmt.Sprint(he.Message)}
	} else {
		ae := apperr.From(err)
		status = apperr.Status(ae.Code)
		body.Error = apperr.BodyError{Code: ae.Code, Message: ae.Message}
	}
	log := s.log.With("method", c.Request().Method, "path", c.Request().URL.Path, "status", status, "error", err)
	if status >= 500 {
		log.Error("request failed")
	} else {
		log.Info("request refused")
	}
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(status)
		return
	}
	_ = c.JSON(status, body)
}

func echoCode(status int) apperr.Code {
	switch status {
	case http.StatusNotFound:
		return apperr.CodeNotFound
	case http.StatusMethodNotAllowed:
		return apperr.CodeMethodNotAllowed
	case http.StatusUnauthorized:
		return apperr.CodeUnauthorized
	case http.StatusRequestEntityTooLarge:
		return apperr.CodePayloadTooLarge
	case http.StatusBadRequest:
		return apperr.CodeInvalidParameter
	default:
		if status >= 500 {
			return apperr.CodeInternal
		}
		return apperr.Code("http_" + strconv.Itoa(status))
	}
}

// observe records every request's route, status and latency. Every label
// comes from a fixed set (metrics fed by request data must not grow with
// it): the route is the registered template, never the raw path, and the
// method one of the standard ones or OTHER.
func (s *Server) observe(m *metrics.Metrics) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			err := next(c)
			if err != nil {
				c.Error(err)
			}
			route, method := routeLabel(c), MethodLabel(c.Request().Method)
			m.HTTPRequests.WithLabelValues(route, method, statusLabel(c.Response().Status)).Inc()
			m.HTTPSeconds.WithLabelValues(route, method).Observe(time.Since(start).Seconds())
			return nil
		}
	}
}

// recoverPanics turns a panicking handler into a 500 JSON error that is
// logged with its stack and counted; the server keeps serving. A deliberate
// http.ErrAbortHandler (abort the response) is passed on to net/http.
func (s *Server) recoverPanics(m *metrics.Metrics) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) (err error) {
			defer func() {
				r := recover()
				if r == nil {
					return
				}
				if r == http.ErrAbortHandler {
					panic(r)
				}
				route := routeLabel(c)
				m.HTTPPanics.WithLabelValues(route).Inc()
				s.log.Error("handler panicked", "route", route, "method", c.Request().Method,
					"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				err = apperr.New(apperr.CodeInternal, "internal error")
			}()
			return next(c)
		}
	}
}

// routeLabel is the route template the request matched ("/internal/v1/events/:id"),
// or "unmatched": echo gives the template, never the raw path, for a
// matched route, and for a path that matched nothing the label must not be
// the path.
func routeLabel(c echo.Context) string {
	route := c.Path()
	if route == "" || c.Response().Status == http.StatusNotFound && !isRoute(c.Echo(), route) {
		return "unmatched"
	}
	return route
}

// isRoute reports whether path is a registered route template.
func isRoute(e *echo.Echo, path string) bool {
	for _, r := range e.Routes() {
		if r.Path == path {
			return true
		}
	}
	return false
}

// methods are the method labels besides OTHER.
var methods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
	http.MethodConnect: true, http.MethodTrace: true,
}

// MethodLabel maps a request method onto a fixed set: the standard methods,
// else OTHER.
func MethodLabel(method string) string {
	if methods[method] {
		return method
	}
	return "OTHER"
}

// statusLabel is the status code, which the server itself chooses (a
// bounded set); anything outside 100–599 is "other".
func statusLabel(status int) string {
	if status < 100 || status > 599 {
		return "other"
	}
	return strconv.Itoa(status)
}
