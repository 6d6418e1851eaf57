package views

import (
	"math"
	"net/url"
	"strconv"
	"strings"
)

// OverviewPage is everything OverviewPage needs: every policy's rates and
// the chosen policy's top clients, as the overview first answered; the
// page's script then follows /ws/overview.
type OverviewPage struct {
	Policy       string // whose top clients are listed
	Shadow       bool   // the policy is a shadow policy: its denials are would-denials
	Policies     []OverviewPolicy
	Checks       []OverviewRow // the keys with the most checks, most first
	Denied       []OverviewRow // the keys with the most denials (would-denials)
	Instances    int
	TickMs       int64
	AssetVersion string
}

// OverviewPolicy is one policy's decisions per second over the last minute.
type OverviewPolicy struct {
	Name                                  string
	Rules                                 string // e.g. "5 per 10s"
	Shadow                                bool
	Allowed, Denied, ShadowDenied, Cached float64
}

// OverviewRow is one client of a top list over the last minute, and the
// per-client override in force for it ("key" or "prefix:<prefix>"; empty:
// its policy's own rules).
type OverviewRow struct {
	Key            string
	Checks, Denied int64
	Override       string
}

// overrideTitle says what a row's override mark means, as the script
// writes it too.
func overrideTitle(label string) string {
	if prefix, ok := strings.CutPrefix(label, "prefix:"); ok {
		return "Its own rules: the override of every key starting with " + prefix
	}
	return "Its own rules: an override of this key"
}

// windowURL is the live page of key's window under policy.
func windowURL(key, policy string) string {
	return "/?" + url.Values{"key": {key}, "policy": {policy}}.Encode()
}

// perSecond writes a rate over the last minute: whole numbers with
// separators from 10 up, one decimal below, and below 0.1/s the count itself
// ("3 in the last minute"): a handful of denials is no "0.0/s".
func perSecond(r float64) string {
	switch {
	case r >= 10:
		return fmtCount(int64(r+0.5)) + "/s"
	case r > 0 && r < 0.1:
		return fmtCount(int64(math.Round(r*60))) + " in the last minute"
	}
	return strconv.FormatFloat(r, 'f', 1, 64) + "/s"
}

// plural names n things: "1 instance", "2 instances".
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// fmtCount writes n with thousands separators: 12,345.
func fmtCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// deniedTitle names the second list: would-denials for a shadow policy.
func (p OverviewPage) deniedTitle() string {
	if p.Shadow {
		return "Would be blocked if enforced"
	}
	return "Most denied"
}

// overviewRates are the four rates a policy card shows, in order.
func (p OverviewPolicy) rates() []struct{ Name, Label, Value string } {
	return []struct{ Name, Label, Value string }{
		{"allowed", "allowed", perSecond(p.Allowed)},
		{"denied", "denied", perSecond(p.Denied)},
		{"shadowDenied", "would deny", perSecond(p.ShadowDenied)},
		{"cached", "from deny cache", perSecond(p.Cached)},
	}
}
