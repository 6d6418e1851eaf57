package rls

import "math"

// Hits is what one descriptor of envoyproxy/ratelimit's files adds to its
// statistics, counted as that service counts them: every hit, and of them
// those over the limit, near it (past NearLimitRatio of it), within it, and
// over it under shadow_mode.
type Hits struct {
	Total, OverLimit, NearLimit, WithinLimit, ShadowMode uint64
}

// Stat names where one descriptor's hits are counted: under Key,
// envoyproxy/ratelimit's statistics key (envoyconf.Match.StatKey), of the
// limit whose policy is named Limit. Key is Limit, or the path the
// descriptor took through the files; where detailed_metric or
// value_to_metric ask, it holds the request's values (hashed as a client
// key hashes them when long or unusual), so a limit has as many keys as
// clients send values.
type Stat struct{ Limit, Key string }

// DefaultNearLimitRatio is envoyproxy/ratelimit's NEAR_LIMIT_RATIO default.
const DefaultNearLimitRatio = 0.8

// hitsOfOutcome counts one decided descriptor's hits. Its window held
// before hits and holds after them (a denial ratescope does not record
// counts as if it had been: after = before + hits); a cost that can never
// pass is over the limit whole.
func hitsOfOutcome(o outcome, ratio float64) Hits {
	hits := uint64(o.c.cost)
	if o.c.peek {
		hits = 0
	}
	h := Hits{Total: hits}
	if o.never {
		h.OverLimit = hits
		return h
	}
	limit := uint64(o.c.file.rate.GetRequestsPerUnit())
	if o.overridden() {
		limit = uint64(max(0, o.d.Bound().Limit))
	}
	count := uint64(max(0, o.d.Bound().Count))
	recorded := hits > 0 && (o.d.Allowed || o.p.CountDenied)
	before, after := count, count+hits
	if recorded {
		before, after = count-min(count, hits), count
	}
	near := uint64(math.Floor(float64(limit) * ratio))
	if after > limit {
		if before >= limit {
			h.OverLimit = hits
		} else {
			h.OverLimit = after - limit
			h.NearLimit = limit - max(near, before)
		}
		if o.p.Shadow {
			h.ShadowMode = h.OverLimit
		}
		return h
	}
	h.WithinLimit = hits
	if after > near {
		h.NearLimit = after - max(near, before)
	}
	return h
}
