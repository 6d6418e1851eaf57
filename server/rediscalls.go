package server

import (
	"context"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
)

// redisCalls is how a handler that calls Redis itself (a window, a reset, the
// lab) bounds that work and answers its failure: within the check timeout,
// and 503 when Redis fails or is too slow, counted in
// ratescope_redis_errors_total by operation.
type redisCalls struct {
	timeout time.Duration
	errors  *prometheus.CounterVec // by op
}

// bound is the request's context, ended after the check timeout.
func (r redisCalls) bound(c echo.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.Request().Context(), r.timeout)
}

// failed counts a failure of op and answers it: 503 saying what failed
// ("failed to read the window from Redis") and that a retry may work.
func (r redisCalls) failed(op, what string) error {
	r.errors.WithLabelValues(op).Inc()
	return unavailable(what + "; try again shortly")
}

// do runs one Redis call under the bound; its failure is failed(op, what).
func (r redisCalls) do(c echo.Context, op, what string, call func(ctx context.Context) error) error {
	ctx, cancel := r.bound(c)
	defer cancel()
	if err := call(ctx); err != nil {
		return r.failed(op, what)
	}
	return nil
}
