package server

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/server/tenants"
)

// usageJSON is the answer of GET /api/v1/usage: where a client stands under
// every rule of a policy — each window and each calendar quota — read
// without consuming anything, for a customer's dashboard ("8,412 of 100,000
// this month, resets on the 1st").
type usageJSON struct {
	Key    string `json:"key"`
	Policy string `json:"policy"`
	// Timezone is the zone the policy's quotas count their days, weeks and
	// months in.
	Timezone string          `json:"timezone"`
	NowMs    int64           `json:"nowMs"`
	Rules    []usageRuleJSON `json:"rules"`
	// Override is the override in force for the key, as the overrides API
	// lists it (its rules are the ones counted here); null while none
	// applies.
	Override *overrideJSON `json:"override"`
}

// usageRuleJSON is one rule's usage: a window's windowMs, or a quota's
// period ("day", "week", "month"), and when it has full room again (a
// window, as the RateLimit header's t counts; 0 when it has) or starts
// again from 0 (a quota: its period's end).
type usageRuleJSON struct {
	Limit     int            `json:"limit"`
	WindowMs  int64          `json:"windowMs,omitempty"`
	Period    limiter.Period `json:"period,omitempty"`
	Count     int            `json:"count"`
	Remaining int            `json:"remaining"`
	ResetMs   int64          `json:"resetMs"`
}

// handleUsage answers GET /api/v1/usage?key=&policy=: every rule's count
// and reset under the rules in force for the key — an override's when one
// applies — consuming nothing. It needs what reading a window needs.
func handleUsage(w windowAPI, ten *tenants.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		key, base, err := w.params(c, false)
		if err != nil {
			return err
		}
		pol := base.Policy
		var applied *overrideJSON
		if o, match := ten.Lookup(pol.Name, key); match != tenants.MatchNone {
			if rules, err := tenants.ParseRules(pol, o.Rules); err == nil {
				j := newOverrideJSON(o, pol)
				applied, pol.Rules = &j, rules
			}
		}
		var win limiter.Window
		// The same read as a window's, counted as one in ratescope_redis_errors_total.
		if err := w.redis.do(c, "window", "failed to read the usage from Redis", func(ctx context.Context) (err error) {
			win, err = w.lim.Window(ctx, key, pol)
			return err
		}); err != nil {
			return err
		}
		out := usageJSON{Key: key, Policy: pol.Name, Timezone: "UTC", NowMs: win.NowMs, Rules: make([]usageRuleJSON, len(win.Rules)), Override: applied}
		if pol.Timezone != "" {
			out.Timezone = pol.Timezone
		}
		for i, r := range win.Rules {
			out.Rules[i] = usageRuleJSON{
				Limit: r.Limit, WindowMs: r.WindowMs, Period: r.Period,
				Count: r.Count, Remaining: r.Remaining, ResetMs: r.ResetMs,
			}
		}
		return c.JSON(http.StatusOK, out)
	}
}
