package server

import (
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/limiter"
)

// app holds what the handlers share: configuration, the limiter and Redis,
// logging and metrics. Handlers get it through their maker functions.
type app struct {
	cfg      Config
	lim      *limiter.Limiter
	rdb      redis.UniversalClient
	log      *slog.Logger
	metrics  *metrics
	instance string
	live     *live
	races    races
}

// observeDecision counts a decision; live viewers hear of it too.
func (a *app) observeDecision(d limiter.Decision) {
	outcome := "allowed"
	if !d.Allowed {
		outcome = "denied"
	}
	a.metrics.decisions.WithLabelValues(d.Policy, outcome).Inc()
	a.live.decision(d)
}

// observeReset tells live viewers a window was reset.
func (a *app) observeReset(key string, p limiter.Policy) { a.live.reset(key, p.Name) }
