package views

import "strconv"

// LabPage is everything LabPage needs: the lab watched and the rule and
// traffic preselected (GET /lab?lab=&limit=&window=).
type LabPage struct {
	Lab          string
	Limit        int
	WindowS      int    // the rule's window in seconds
	Traffic      string // one of LabTraffic
	NameMax      int    // the longest lab name
	Keys         string // where its windows live in Redis, e.g. rate_limit:{lab:x}:@lab:…
	TickMs       int64
	Instance     string
	AssetVersion string
	Facts        Facts
	// TokenRequired says the lab's checks need the API token (the server
	// runs with --api-token and without --public-lab): the page says so and
	// asks for it, instead of failing on its first request.
	TokenRequired bool
}

// LabTraffic are the lab's traffic shapes, as the select offers them.
var LabTraffic = []struct{ Value, Label string }{
	{"boundary", "boundary · limit before a fixed-window edge, limit after"},
	{"burst", "burst · 2 × limit at once"},
	{"steady", "steady · 1.5 × the rate, two windows"},
	{"random", "random · Poisson at 1.5 × the rate"},
}

func itoa(n int) string { return strconv.Itoa(n) }

// maxExplained says what a lane's "max" counts, wherever it is shown.
const maxExplained = "the most allowed in any sliding window of the rule's length; above the limit, the algorithm let a burst through"
