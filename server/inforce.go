package server

import (
	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/server/live"
	"github.com/ratescope/ratescope/server/tenants"
)

// rulesInForce tells what people watch — the page, the live view, the
// overview — which rules decide a client's checks: its override's when one
// applies, as the Checker's Resolve decides (an override whose rules a
// reload made unfit for its policy applies to nothing), else the policy's.
type rulesInForce struct {
	store *configStore
	ten   *tenants.Store
}

// live is live.Deps.Resolve: the policy in force for key under p and the
// override it comes from. A key of a policy without overrides costs a map
// read.
func (f rulesInForce) live(key string, p limiter.Policy) (limiter.Policy, *live.Override) {
	o, match := f.ten.Lookup(p.Name, key)
	if match == tenants.MatchNone {
		return p, nil
	}
	base, ok := f.store.policy(p.Name)
	if !ok {
		return p, nil
	}
	in := f.ten.Resolve(key, base)
	if in.Override() == "" {
		return p, nil
	}
	return in.Policy, &live.Override{Label: in.Override(), Rules: in.Rules, Note: o.Note, UpdatedMs: o.UpdatedMs}
}

// label names the override in force for key under policy, "" when none:
// the overview marks such keys.
func (f rulesInForce) label(policy, key string) string {
	if !f.ten.Overridden(policy, key) {
		return ""
	}
	base, ok := f.store.policy(policy)
	if !ok {
		return ""
	}
	return f.ten.Resolve(key, base).Override()
}
