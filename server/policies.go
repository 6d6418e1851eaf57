package server

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/ratescope/ratescope/limiter"
)

type policyJSON struct {
	Name      string            `json:"name"`
	Rules     []policyRuleJSON  `json:"rules"`
	Algorithm limiter.Algorithm `json:"algorithm"` // SPEC §8: one of limiter.Algorithms
	Shadow    bool              `json:"shadow"`    // SPEC §9
	// Timezone is the zone the policy's calendar quotas count in, when it
	// names one (UTC otherwise).
	Timezone string `json:"timezone,omitempty"`
	// LeaseMs is an inflight policy's lease time.
	LeaseMs int64 `json:"leaseMs,omitempty"`
}

// policyRuleJSON is a rule: its window, or a calendar quota's period
// ("day", "week", "month").
type policyRuleJSON struct {
	Limit    int            `json:"limit"`
	WindowMs int64          `json:"windowMs,omitempty"`
	Period   limiter.Period `json:"period,omitempty"`
	// InFlight marks a rule LIMIT/inflight: at most limit leases at once.
	InFlight bool `json:"inflight,omitempty"`
}

// policiesJSON is the answer of GET /api/v1/policies: the policies in force,
// the version of the config they belong to and when it was loaded.
type policiesJSON struct {
	Policies []policyJSON `json:"policies"`
	Version  string       `json:"version"`
	LoadedAt int64        `json:"loadedAt"` // epoch milliseconds
}

// handlePolicies lists the policies in force: GET /api/v1/policies.
func handlePolicies(store *configStore) echo.HandlerFunc {
	return func(c echo.Context) error {
		set := store.load()
		out := policiesJSON{Version: set.version, LoadedAt: set.loadedAt.UnixMilli()}
		for _, p := range set.policies {
			pj := policyJSON{Name: p.Name, Algorithm: p.Policy.AlgorithmName(), Shadow: p.Shadow, Timezone: p.Timezone, LeaseMs: p.Lease.Milliseconds()}
			for _, r := range p.Rules {
				pj.Rules = append(pj.Rules, rulesJSON([]limiter.Rule{r})...)
			}
			out.Policies = append(out.Policies, pj)
		}
		return c.JSON(http.StatusOK, out)
	}
}
