package server

import (
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/server/live"
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
	live     *live.View
	races    races

	checkPolicies map[string]*checkPolicy // by name, one per configured policy
}

// observeReset tells live viewers a window was reset.
func (a *app) observeReset(key string, p limiter.Policy) { a.live.Reset(key, p.Name) }
