// Package views renders the visualizer page. It takes plain view models, never
// domain types, so the server decides what a learner sees and the templates
// stay free of limiter or Redis details.
package views

import (
	"encoding/json"
	"strconv"
	"strings"
)

// Rule is one (limit, window) pair of a policy, e.g. {5, 10000, "5 per 10s"},
// or a calendar quota's (limit, period), windowMs 0: {3, 0, "3 per month",
// "month"}.
type Rule struct {
	Limit    int    `json:"limit"`
	WindowMs int64  `json:"windowMs"`
	Label    string `json:"label"`
	Period   string `json:"period,omitempty"`
}

// Policy is a named set of rules offered in the policy picker, with the
// algorithm that keeps its windows (one of Facts.Algorithms; empty means the
// default) and whether it is a shadow policy.
type Policy struct {
	Name      string `json:"name"`
	Rules     []Rule `json:"rules"`
	Algorithm string `json:"algorithm"`
	Shadow    bool   `json:"shadow"`
	// Timezone is the zone its calendar quotas count in; empty: UTC.
	Timezone string `json:"timezone,omitempty"`
}

// Override is the per-client override in force for the shown key: its
// label ("key" for the key's own, "prefix:<prefix>" for a prefix's), the
// rules it gives the key instead of the policy's, and its note.
type Override struct {
	Label string
	Rules []Rule
	Note  string
}

// Text says what the override is, as the page's script writes it too:
// "override for prefix acme: — 1000 per 1m, 20000 per 24h — enterprise plan".
func (o *Override) Text() string {
	if o == nil {
		return ""
	}
	who := "this key"
	if prefix, ok := strings.CutPrefix(o.Label, "prefix:"); ok {
		who = "prefix " + prefix
	}
	s := "override for " + who + " — " + rulesLabel(Policy{Rules: o.Rules})
	if o.Note != "" {
		s += " — " + o.Note
	}
	return s
}

// Algorithm is one algorithm as the pages show it: its name, what people
// call it, a line on what it keeps, a sentence on what it trades, and
// whether it keeps one entry per request (a sorted set) rather than a few
// numbers per rule (a hash).
type Algorithm struct {
	Name     string `json:"name"`
	Title    string `json:"title"`
	Caption  string `json:"caption"`
	Tradeoff string `json:"tradeoff"`
	Entries  bool   `json:"entries"`
	// Steps are what one decision does in Redis, read from the
	// algorithm's script: the page's "What one check does".
	Steps []Step `json:"steps,omitempty"`
}

// Step is one step of a decision's script: the Redis commands it may call
// and what it does; Name is its handle in an explanation's steps.
type Step struct {
	Name     string   `json:"name"`
	Commands []string `json:"commands"`
	Text     string   `json:"text"`
}

// Facts are what the server says of itself to every page and its scripts,
// so neither keeps a copy: the client key's alphabet (KeyChars, a regular
// expression's character class, and KeyAlphabet for people) and length,
// where a window lives in Redis (KeyFormat for a sorted set, StateKeyFormat
// for a hash, with <key>, <policy> and <algorithm> standing for the
// values), the public sandbox policy, and every algorithm, the default
// first.
type Facts struct {
	KeyChars       string
	KeyAlphabet    string
	KeyMax         int
	KeyFormat      string
	StateKeyFormat string
	Sandbox        string
	Algorithms     []Algorithm
}

// describe finds an algorithm by name; the default (the first) when name is
// empty or unknown.
func (f Facts) describe(name string) Algorithm {
	for _, a := range f.Algorithms {
		if a.Name == name {
			return a
		}
	}
	if name == "" && len(f.Algorithms) > 0 {
		return f.Algorithms[0]
	}
	return Algorithm{Name: name}
}

// redisKey is where key's window under policy lives for algorithm a.
func (f Facts) redisKey(key, policy string, a Algorithm) string {
	format := f.StateKeyFormat
	if a.Entries || a.Name == inflight { // leases live in a sorted set too
		format = f.KeyFormat
	}
	return strings.NewReplacer("<key>", key, "<policy>", policy, "<algorithm>", a.Name).Replace(format)
}

// keyHint says what a key of at most max bytes may be, e.g. "1–128 of A–Z
// a–z 0–9 . _ : @ / + = -": ranges with an en dash.
func (f Facts) keyHint(max int) string {
	fields := strings.Fields(f.KeyAlphabet)
	for i, tok := range fields {
		if len(tok) == 3 && tok[1] == '-' {
			fields[i] = tok[:1] + "–" + tok[2:]
		}
	}
	return "1–" + strconv.Itoa(max) + " of " + strings.Join(fields, " ")
}

// count says how many algorithms there are, in words: "five".
func (f Facts) count() string {
	words := []string{"no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"}
	if n := len(f.Algorithms); n < len(words) {
		return words[n]
	}
	return strconv.Itoa(len(f.Algorithms))
}

// algorithmsJSON feeds the algorithms to the script.
func (f Facts) algorithmsJSON() string {
	b, err := json.Marshal(f.Algorithms)
	if err != nil || f.Algorithms == nil { // cannot fail for these plain types
		return "[]"
	}
	return string(b)
}

// algorithm is pol's algorithm, the default filled in.
func (p Page) algorithmOf(pol Policy) Algorithm { return p.Facts.describe(pol.Algorithm) }

// algorithmLabel names what the page shows, e.g. "gcra" or "gcra · shadow".
func (p Page) algorithmLabel(pol Policy) string {
	if pol.Shadow {
		return p.algorithmOf(pol).Name + " · shadow"
	}
	return p.algorithmOf(pol).Name
}

// shown is the preselected policy (empty when it is not offered).
func (p Page) shown() Policy {
	pol, _ := p.selected()
	return pol
}

// algorithm is the preselected policy's algorithm.
func (p Page) algorithm() Algorithm { return p.algorithmOf(p.shown()) }

// inflight is the algorithm of a policy of requests in flight
// (LIMIT/inflight): its window holds leases, not checks.
const inflight = "inflight"

// waitChoices are what "wait up to" offers beside the send button: the
// check's wait parameter.
var waitChoices = []struct{ Value, Label string }{
	{"0", "0 (answer at once)"}, {"2s", "2 s"}, {"10s", "10 s"},
}

// sendLabel names the send button: on a window of leases it takes one.
func sendLabel(a Algorithm) string {
	if a.Name == inflight {
		return "Take a lease"
	}
	return "Send a request"
}

// countLabel names the count readout: the log counts entries in its window,
// an inflight policy its leases, the others report what is used of the
// limit.
func countLabel(a Algorithm) string {
	if a.Name == inflight {
		return "In flight / limit"
	}
	if a.Entries {
		return "In window / limit"
	}
	return "Used / limit"
}

// Page is everything IndexPage needs. Key and Policy name the window shown
// first (the server defaults them to demo/demo); the page's script then
// follows the WebSocket stream of that window.
type Page struct {
	Key      string
	Policy   string
	Policies []Policy
	// Override is the override in force for Key under Policy; nil: none.
	Override     *Override
	TickMs       int64  // server tick interval, so the script can spot a silent socket
	Instance     string // id of the instance that rendered the page
	AssetVersion string // appended as ?v= to static URLs so deploys bust caches
	Facts        Facts
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

// rules are the rules in force for the shown key: the override's, or the
// preselected policy's.
func (p Page) rules() []Rule {
	if p.Override != nil {
		return p.Override.Rules
	}
	return p.shown().Rules
}

// minLimit is the smallest limit of the rules in force: the one that binds
// first, shown as the count's denominator until the stream says more.
func (p Page) minLimit() string {
	rules := p.rules()
	if len(rules) == 0 {
		return "–"
	}
	m := rules[0].Limit
	for _, r := range rules[1:] {
		m = min(m, r.Limit)
	}
	return strconv.Itoa(m)
}

// quotas are the calendar quotas in force for the shown key, each drawn as
// a bar with its reset.
func (p Page) quotas() []Rule {
	var out []Rule
	for _, r := range p.rules() {
		if r.Period != "" {
			out = append(out, r)
		}
	}
	return out
}

// quotaName names a quota's period as its bar does: "today", "this week",
// "this month".
func quotaName(period string) string {
	if period == "day" {
		return "today"
	}
	return "this " + period
}

// raceModes are the race's modes in the order the race panel shows them:
// counting every request (naive, atomic), then counting only failures
// (peek then record, check then keep).
var raceModes = []string{"naive", "atomic", "peekrecord", "reserverefund"}

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

// redisKeyLabel names what the shown window's key holds.
func redisKeyLabel(a Algorithm) string {
	if a.Entries || a.Name == inflight {
		return "Redis sorted set"
	}
	return "Redis hash, a field per rule"
}

// capitalize upper-cases the first letter of an ASCII word.
func capitalize(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}
