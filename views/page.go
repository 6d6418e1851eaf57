// Package views renders the visualizer page. It takes plain view models, never
// domain types, so the server decides what a learner sees and the templates
// stay free of limiter or Redis details.
package views

import (
	"encoding/json"
	"strconv"
)

// Rule is one (limit, window) pair of a policy, e.g. {5, 10000, "5 per 10s"}.
type Rule struct {
	Limit    int    `json:"limit"`
	WindowMs int64  `json:"windowMs"`
	Label    string `json:"label"`
}

// Policy is a named set of rules offered in the policy picker, with the
// algorithm that keeps its windows (log, fixed, counter, gcra or bucket;
// empty means log) and whether it is a shadow policy.
type Policy struct {
	Name      string `json:"name"`
	Rules     []Rule `json:"rules"`
	Algorithm string `json:"algorithm"`
	Shadow    bool   `json:"shadow"`
}

// AlgorithmCaptions say in one line what each algorithm keeps and decides.
// The page's script reads them from a data- attribute, so they live here once.
var AlgorithmCaptions = map[string]string{
	"log":     "Sliding-window log: one sorted-set entry per allowed request, scored by Redis time; exact.",
	"fixed":   "Fixed window: one counter per window aligned on Redis time; it starts again from 0 at each edge, so a burst can pass just before and just after one.",
	"counter": "Sliding-window counter: the previous window's count, weighted by how much of it the sliding window still covers, plus the current window's count; two counters, an approximation.",
	"gcra":    "GCRA: one timestamp, the theoretical arrival time (TAT); each request pushes it on by window / limit, and a request fits while the TAT stays within one window of now.",
	"bucket":  "Token bucket: up to limit tokens, refilled continuously at limit per window; each request takes its cost in tokens.",
}

// algorithm is pol's algorithm with the default filled in.
func algorithm(pol Policy) string {
	if pol.Algorithm == "" {
		return "log"
	}
	return pol.Algorithm
}

// algorithmLabel names what the page shows, e.g. "gcra" or "gcra · shadow".
func algorithmLabel(pol Policy) string {
	if pol.Shadow {
		return algorithm(pol) + " · shadow"
	}
	return algorithm(pol)
}

// shown is the preselected policy (empty when it is not offered).
func (p Page) shown() Policy {
	pol, _ := p.selected()
	return pol
}

// algorithm is the preselected policy's algorithm (log when unknown).
func (p Page) algorithm() string { return algorithm(p.shown()) }

// countLabel names the count readout: the log counts entries in its window,
// the others report what is used of the limit.
func countLabel(algorithm string) string {
	if algorithm == "log" {
		return "In window / limit"
	}
	return "Used / limit"
}

// captionsJSON feeds AlgorithmCaptions to the script.
func captionsJSON() string {
	b, err := json.Marshal(AlgorithmCaptions)
	if err != nil { // cannot happen for a map of strings
		return "{}"
	}
	return string(b)
}

// Page is everything IndexPage needs. Key and Policy name the window shown
// first (the server defaults them to demo/demo); the page's script then
// follows the WebSocket stream of that window.
type Page struct {
	Key          string
	Policy       string
	Policies     []Policy
	TickMs       int64  // server tick interval, so the script can spot a silent socket
	Instance     string // id of the instance that rendered the page
	AssetVersion string // appended as ?v= to static URLs so deploys bust caches
}

// asset returns the URL of a static file with the cache-busting version.
func (p Page) asset(name string) string {
	u := "/static/" + name
	if p.AssetVersion != "" {
		u += "?v=" + p.AssetVersion
	}
	return u
}

// selected returns the preselected policy, or false when it is not offered.
func (p Page) selected() (Policy, bool) {
	for _, pol := range p.Policies {
		if pol.Name == p.Policy {
			return pol, true
		}
	}
	return Policy{}, false
}

// minLimit is the smallest limit of the preselected policy: the one that
// binds first, shown as the count's denominator until the stream says more.
func (p Page) minLimit() string {
	pol, ok := p.selected()
	if !ok || len(pol.Rules) == 0 {
		return "–"
	}
	m := pol.Rules[0].Limit
	for _, r := range pol.Rules[1:] {
		m = min(m, r.Limit)
	}
	return strconv.Itoa(m)
}

// rulesLabel joins a policy's rule labels for the picker, e.g. "5 per 1s, 100 per 1m".
func rulesLabel(pol Policy) string {
	s := ""
	for i, r := range pol.Rules {
		if i > 0 {
			s += ", "
		}
		s += r.Label
	}
	return s
}

// policiesJSON feeds the policies to the script through a data- attribute,
// because the Content-Security-Policy forbids inline scripts.
func policiesJSON(ps []Policy) string {
	if ps == nil {
		ps = []Policy{}
	}
	b, err := json.Marshal(ps)
	if err != nil { // cannot happen for these plain types
		return "[]"
	}
	return string(b)
}

// redisKey is where the shown window lives in Redis: the log's sorted set,
// or the other algorithms' hash, e.g. rate_limit:{demo}:api:gcra.
func redisKey(key, policy, algorithm string) string {
	if algorithm == "log" {
		return zsetKey(key, policy)
	}
	return zsetKey(key, policy) + ":" + algorithm
}

// redisKeyLabel names what redisKey holds.
func redisKeyLabel(algorithm string) string {
	if algorithm == "log" {
		return "Redis sorted set"
	}
	return "Redis hash, a field per rule"
}

// zsetKey is the Redis key of the shown window, e.g. rate_limit:{demo}:demo.
func zsetKey(key, policy string) string {
	return "rate_limit:{" + key + "}:" + policy
}
