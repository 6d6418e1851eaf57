package views

import (
	"encoding/json"
	"strconv"
)

// LabPage is everything LabPage needs: the lab watched and the rule and
// traffic preselected (GET /lab?lab=&limit=&window=).
type LabPage struct {
	Lab          string
	Limit        int
	WindowS      int    // the rule's window in seconds
	Traffic      string // one of LabTraffic
	Algorithms   []string
	TickMs       int64
	Instance     string
	AssetVersion string
}

// LabTraffic are the lab's traffic shapes, as the select offers them.
var LabTraffic = []struct{ Value, Label string }{
	{"boundary", "boundary · limit before a fixed-window edge, limit after"},
	{"burst", "burst · 2 × limit at once"},
	{"steady", "steady · 1.5 × the rate, two windows"},
	{"random", "random · Poisson at 1.5 × the rate"},
}

// labCaptions explain each algorithm in one sentence.
var labCaptions = map[string]struct{ Title, Caption string }{
	"log":     {"Sliding-window log", "Keeps the time of every allowed request, so no window of the rule's length ever holds more than the limit: exact, at one sorted-set entry per request."},
	"fixed":   {"Fixed window", "One counter per window aligned to the clock, emptied at every edge: cheap, but limit requests just before an edge and limit just after it all pass."},
	"counter": {"Sliding-window counter", "Two counters: the previous window's count weighted by how much of it still overlaps, plus the current one; close to the log, yet an estimate."},
	"gcra":    {"GCRA", "One timestamp, the theoretical arrival time: a burst of up to limit, then one request per window ÷ limit, as go-redis/redis_rate does."},
	"bucket":  {"Token bucket", "A bucket of limit tokens refilled continuously at limit per window, one token per request: it decides as GCRA does, storing tokens and a time."},
}

func labTitle(alg string) string   { return labCaptions[alg].Title }
func labCaption(alg string) string { return labCaptions[alg].Caption }

func (p LabPage) asset(name string) string { return Page{AssetVersion: p.AssetVersion}.asset(name) }

func itoa(n int) string { return strconv.Itoa(n) }

// jsonList feeds a list of names to the script through a data- attribute.
func jsonList(xs []string) string {
	b, err := json.Marshal(xs)
	if err != nil || xs == nil {
		return "[]"
	}
	return string(b)
}
