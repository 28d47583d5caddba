package service

import (
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// clientAddress makes c.IP() the connection's address when a trusted proxy did not name the client
// (a direct call from a trusted address): Fiber would otherwise answer with an empty string.
func clientAddress(proxyHeader string) fiber.Handler {
	return func(c *fiber.Ctx) error {
		if proxyHeader != "" && c.Get(proxyHeader) == "" {
			c.Request().Header.Set(proxyHeader, c.Context().RemoteIP().String())
		}
		return c.Next()
	}
}

// RequestIDHeader carries the request id from the gateway through every service and back.
const RequestIDHeader = "X-Request-ID"

const requestIDKey = "obsops.request_id"

// RequestID returns the id of the request being handled.
func RequestID(c *fiber.Ctx) string {
	id, _ := c.Locals(requestIDKey).(string)
	return id
}

// requestID accepts a well-formed incoming X-Request-ID (so one id follows a request through the
// gateway into the services) and otherwise makes a new one; either way it is echoed back.
func requestID(c *fiber.Ctx) error {
	id := c.Get(RequestIDHeader)
	if !validRequestID(id) {
		id = uuid.NewString()
	}
	c.Locals(requestIDKey, id)
	c.Request().Header.Set(RequestIDHeader, id)
	c.Set(RequestIDHeader, id)
	return c.Next()
}

// validRequestID keeps ids short and printable so they cannot forge log lines.
func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' || r == ':') {
			return false
		}
	}
	return true
}

type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "obsops_http_requests_total", Help: "HTTP requests by method, route template and status.",
		}, []string{"method", "route", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "obsops_http_request_duration_seconds", Help: "HTTP request latency by method and route template.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"method", "route"}),
	}
	reg.MustRegister(m.requests, m.duration)
	return m
}

// accessLog writes one JSON line per request and records its metrics. It turns a handler's
// error into the response here (not after the chain) so the logged status is the one sent.
func accessLog(log *slog.Logger, m *httpMetrics) fiber.Handler {
	return func(c *fiber.Ctx) error {
		start := time.Now()
		if err := c.Next(); err != nil {
			if herr := c.App().Config().ErrorHandler(c, err); herr != nil {
				_ = c.SendStatus(fiber.StatusInternalServerError)
			}
		}
		elapsed := time.Since(start)
		status := c.Response().StatusCode()
		route := c.Route().Path
		if status == fiber.StatusNotFound && route == "/" && c.Path() != "/" {
			route = "unmatched"
		}
		m.requests.WithLabelValues(c.Method(), route, strconv.Itoa(status)).Inc()
		m.duration.WithLabelValues(c.Method(), route).Observe(elapsed.Seconds())

		level := slog.LevelInfo
		switch p := c.Path(); {
		case p == "/healthz" || p == "/readyz" || p == "/metrics":
			level = slog.LevelDebug
		case status >= 500:
			level = slog.LevelError
		}
		log.LogAttrs(c.UserContext(), level, "request",
			slog.String("request_id", RequestID(c)),
			slog.String("method", c.Method()),
			slog.String("path", c.Path()),
			slog.String("route", route),
			slog.Int("status", status),
			slog.Float64("duration_ms", float64(elapsed.Microseconds())/1000),
			slog.Int("bytes_out", len(c.Response().Body())),
			slog.String("client", c.IP()),
		)
		return nil
	}
}

// recoverPanics turns a panic into a logged 500 problem instead of a dropped connection.
func recoverPanics(log *slog.Logger) fiber.Handler {
	return func(c *fiber.Ctx) (err error) {
		defer func() {
			if r := recover(); r != nil {
				log.Error("panic", "request_id", RequestID(c), "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				err = fiber.NewError(fiber.StatusInternalServerError, "internal error")
			}
		}()
		return c.Next()
	}
}

func metricsHandler(reg *prometheus.Registry) fiber.Handler {
	h := fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return func(c *fiber.Ctx) error {
		h(c.Context())
		return nil
	}
}
