package rls

import (
	"math"
	"slices"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
)

// The response header names (SPEC §3, §7).
const (
	headerRateLimit       = "RateLimit"
	headerRateLimitPolicy = "RateLimit-Policy"
	headerRetryAfter      = "Retry-After"
)

// respond builds the answer from the outcomes, one status per descriptor in
// the request's order: OVER_LIMIT overall when any descriptor was denied or
// its cost can never pass — save descriptors of quota_mode limits, which
// make it OVER_LIMIT only when all of them are — and OK whatever the
// statuses under SHADOW_MODE (shadow). A shadow policy's would-deny (SPEC
// §9) is answered as allowed: OK, no Retry-After. A limit of the files is
// described in its own unit; an unlimited one is OK with 4294967295
// remaining, as envoyproxy/ratelimit answers it.
func respond(outs []outcome, headers func(*httplimit.Policy, limiter.Decision) (string, string), shadow bool) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(outs)),
	}
	var retryMs int64
	var over, quotas, quotasOver int
	denied := false
	for i, o := range outs {
		var st *rlsv3.RateLimitResponse_DescriptorStatus
		no := false
		switch {
		case o.c.unlimited:
			st = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
		case o.never:
			st, no = neverStatus(o.p.Policy), true
		case !o.decided:
			st = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		default:
			st, no = descriptorStatus(o.d), o.d.Denied()
			if no {
				retryMs, denied = max(retryMs, o.d.RetryAfterMs), true
			}
		}
		if f := o.c.file; f != nil && st.CurrentLimit != nil && !o.overridden() {
			st.CurrentLimit.RequestsPerUnit, st.CurrentLimit.Unit = f.rate.RequestsPerUnit, f.rate.Unit
		}
		resp.Statuses[i] = st
		quota := o.c.file != nil && o.c.file.quota && (o.decided || o.never)
		switch {
		case quota && no:
			quotas, quotasOver = quotas+1, quotasOver+1
		case quota:
			quotas++
		case no:
			over++
		}
	}
	if (over > 0 || (quotas > 0 && quotas == quotasOver)) && !shadow {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	resp.ResponseHeadersToAdd = responseHeaders(outs, headers)
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT && denied { // a cost that can never pass has no time to wait for
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{
			Key: headerRetryAfter, Value: httplimit.RetryAfter(retryMs),
		})
	}
	return resp
}

// descriptorStatus describes one decision by its binding rule. A would-deny
// reads as an allow (duration_until_reset 0): Envoy turns the status into
// what its client sees, and a shadow policy must not change that.
func descriptorStatus(d limiter.Decision) *rlsv3.RateLimitResponse_DescriptorStatus {
	code := rlsv3.RateLimitResponse_OK
	var retry time.Duration
	if d.Denied() {
		code = rlsv3.RateLimitResponse_OVER_LIMIT
		retry = time.Duration(d.RetryAfterMs) * time.Millisecond
	}
	st := &rlsv3.RateLimitResponse_DescriptorStatus{
		Code:               code,
		DurationUntilReset: durationpb.New(retry),
	}
	if len(d.Rules) > 0 { // always, from the limiter
		b := d.Bound()
		st.CurrentLimit = currentLimit(d.Policy, len(d.Rules), b)
		st.LimitRemaining = clampUint32(int64(b.Remaining))
	}
	return st
}

// neverStatus answers a cost that policy p can never allow (above its
// MaxCost), decided without Redis: OVER_LIMIT under the rule with the
// smallest limit, nothing remaining for such a cost, and no time after which
// it would pass (duration_until_reset 0).
func neverStatus(p limiter.Policy) *rlsv3.RateLimitResponse_DescriptorStatus {
	var r limiter.Rule
	for i, c := range p.Rules {
		if i == 0 || c.Limit < r.Limit {
			r = c
		}
	}
	return &rlsv3.RateLimitResponse_DescriptorStatus{
		Code:               rlsv3.RateLimitResponse_OVER_LIMIT,
		CurrentLimit:       currentLimit(p.Name, len(p.Rules), limiter.RuleState{Limit: r.Limit, WindowMs: r.WindowMs(), Period: r.Period}),
		DurationUntilReset: durationpb.New(0),
	}
}

// units are Envoy's units a window may be expressed in, largest first.
var units = []struct {
	unit rlsv3.RateLimitResponse_RateLimit_Unit
	ms   int64
}{
	{rlsv3.RateLimitResponse_RateLimit_DAY, 24 * 3600 * 1000},
	{rlsv3.RateLimitResponse_RateLimit_HOUR, 3600 * 1000},
	{rlsv3.RateLimitResponse_RateLimit_MINUTE, 60 * 1000},
	{rlsv3.RateLimitResponse_RateLimit_SECOND, 1000},
}

// periodUnits are Envoy's units of the calendar quotas' periods.
var periodUnits = map[limiter.Period]rlsv3.RateLimitResponse_RateLimit_Unit{
	limiter.Day:   rlsv3.RateLimitResponse_RateLimit_DAY,
	limiter.Week:  rlsv3.RateLimitResponse_RateLimit_WEEK,
	limiter.Month: rlsv3.RateLimitResponse_RateLimit_MONTH,
}

// currentLimit expresses a rule in Envoy's terms: the largest unit that
// divides its window exactly (SECOND when none does), and the limit scaled to
// that unit, rounded up — 37/30s is 2 per SECOND, 5/60s is 5 per MINUTE; a
// calendar quota is its limit per DAY, WEEK or MONTH. The name is the
// rule's item name in the RateLimit headers.
func currentLimit(policy string, rules int, r limiter.RuleState) *rlsv3.RateLimitResponse_RateLimit {
	if unit, ok := periodUnits[r.Period]; ok {
		return &rlsv3.RateLimitResponse_RateLimit{
			Name:            httplimit.RuleName(policy, rules, r.Period, 0),
			RequestsPerUnit: clampUint32(int64(r.Limit)),
			Unit:            unit,
		}
	}
	u := units[len(units)-1]
	for _, c := range units {
		if r.WindowMs > 0 && r.WindowMs%c.ms == 0 {
			u = c
			break
		}
	}
	perUnit := int64(r.Limit)
	if r.WindowMs > 0 {
		perUnit = (int64(r.Limit)*u.ms + r.WindowMs - 1) / r.WindowMs
	}
	return &rlsv3.RateLimitResponse_RateLimit{
		Name:            httplimit.ItemName(policy, rules, r.WindowMs),
		RequestsPerUnit: clampUint32(perUnit),
		Unit:            u.unit,
	}
}

func clampUint32(n int64) uint32 {
	return uint32(min(max(n, 0), math.MaxUint32))
}

// responseHeaders are the RateLimit and RateLimit-Policy fields of every
// policy decided, in the order the policies first appear in the request.
// When several descriptors share a policy, the fields describe the one that
// binds most (denied before allowed, then the longest retry, then the least
// remaining), so an item name never appears twice.
func responseHeaders(outs []outcome, headers func(*httplimit.Policy, limiter.Decision) (string, string)) []*corev3.HeaderValue {
	var only *outcome // the one decided, when only one was: a flood's call
	for i := range outs {
		if !outs[i].decided {
			continue
		}
		if only != nil {
			only = nil
			break
		}
		only = &outs[i]
	}
	if only != nil {
		return headerValues(headers(only.p, only.d))
	}
	var chosen []outcome
	for _, o := range outs {
		if !o.decided {
			continue
		}
		j := slices.IndexFunc(chosen, func(c outcome) bool { return c.d.Policy == o.d.Policy })
		switch {
		case j < 0:
			chosen = append(chosen, o)
		case bindsMore(o.d, chosen[j].d):
			chosen[j] = o
		}
	}
	if len(chosen) == 0 {
		return nil
	}
	rl := make([]string, 0, len(chosen))
	rlp := make([]string, 0, len(chosen))
	for _, o := range chosen {
		a, b := headers(o.p, o.d)
		rl, rlp = append(rl, a), append(rlp, b)
	}
	return headerValues(strings.Join(rl, ", "), strings.Join(rlp, ", "))
}

// headerValues are the RateLimit and RateLimit-Policy fields, with room for
// a Retry-After.
func headerValues(rateLimit, rateLimitPolicy string) []*corev3.HeaderValue {
	hs := make([]*corev3.HeaderValue, 2, 3)
	hs[0] = &corev3.HeaderValue{Key: headerRateLimit, Value: rateLimit}
	hs[1] = &corev3.HeaderValue{Key: headerRateLimitPolicy, Value: rateLimitPolicy}
	return hs
}

// bindsMore reports whether a binds more than b.
func bindsMore(a, b limiter.Decision) bool {
	switch {
	case a.Denied() != b.Denied():
		return a.Denied()
	case a.Denied():
		return a.RetryAfterMs > b.RetryAfterMs
	default:
		return remaining(a) < remaining(b)
	}
}

func remaining(d limiter.Decision) int {
	if len(d.Rules) == 0 {
		return math.MaxInt
	}
	return d.Bound().Remaining
}
