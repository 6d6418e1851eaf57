package rls

import (
	"math"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratescope/ratescope/server/envoyconf"
)

// Compat shapes answers as envoyproxy/ratelimit does (--envoy-compat), so
// they equal its answers for the same files and traffic, field for field.
type Compat struct {
	// Headers adds the limit, remaining and reset headers of the descriptor
	// closest to its limit (LIMIT_RESPONSE_HEADERS_ENABLED), named
	// LimitHeader, RemainingHeader and ResetHeader (RateLimit-Limit,
	// RateLimit-Remaining and RateLimit-Reset unless renamed).
	Headers                                   bool
	LimitHeader, RemainingHeader, ResetHeader string
}

// compatRespond answers as envoyproxy/ratelimit does:
//   - a status per descriptor: the limit as the file (or override) wrote it,
//     name included only when it has one; OK with limit - count remaining,
//     or OVER_LIMIT with 0; duration_until_reset the whole seconds until the
//     unit's window ends, on every status with a limit; a shadow limit's
//     OVER_LIMIT is OK with the rest unchanged; unlimited is OK with
//     4294967295 remaining and no limit; no limit is a bare OK;
//   - overall OVER_LIMIT when a descriptor not in quota mode is over, or
//     every quota descriptor is; then OK again under SHADOW_MODE (shadow);
//   - with Headers, the headers of the descriptor with the least remaining
//     or, when one is over, of the last one over.
func compatRespond(outs []outcome, c *Compat, shadow bool) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(outs))}
	var closest *rlsv3.RateLimitResponse_DescriptorStatus
	least := uint32(math.MaxUint32)
	var over, quotas, quotasOver int
	nowMs := answerTime(outs)
	for i, o := range outs {
		if o.c.unlimited {
			resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
			continue
		}
		st := compatStatus(o, nowMs)
		resp.Statuses[i] = st
		if st.CurrentLimit != nil && st.LimitRemaining < least {
			closest, least = st, st.LimitRemaining
		}
		quota := o.c.file != nil && o.c.file.quota
		if quota {
			quotas++
		}
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			if quota {
				quotasOver++
				continue
			}
			over++
			closest, least = st, 0
		}
	}
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	if (over > 0 || (quotas > 0 && quotas == quotasOver)) && !shadow {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if c.Headers && closest != nil {
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{
			{Key: c.LimitHeader, Value: strconv.FormatUint(uint64(closest.CurrentLimit.RequestsPerUnit), 10)},
			{Key: c.RemainingHeader, Value: strconv.FormatUint(uint64(closest.LimitRemaining), 10)},
			{Key: c.ResetHeader, Value: strconv.FormatInt(closest.DurationUntilReset.GetSeconds(), 10)},
		}
	}
	return resp
}

// compatStatus is one descriptor's status in envoyproxy/ratelimit's terms.
// Its duration until reset counts from nowMs, the one moment of the whole
// answer, as envoyproxy/ratelimit reads its clock once a request: two
// descriptors decided on either side of a second's edge still say the same.
func compatStatus(o outcome, nowMs int64) *rlsv3.RateLimitResponse_DescriptorStatus {
	if !o.decided && !o.never {
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	rate := compatRate(o)
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OVER_LIMIT, CurrentLimit: rate}
	if o.decided {
		switch {
		case o.d.Allowed:
			st.Code, st.LimitRemaining = rlsv3.RateLimitResponse_OK, clampUint32(int64(o.d.Bound().Remaining))
		case o.d.Shadow:
			st.Code = rlsv3.RateLimitResponse_OK
		}
	} else if o.p.Shadow {
		st.Code = rlsv3.RateLimitResponse_OK
	}
	if w, ok := envoyconf.UnitLength(rate.Unit); ok {
		s := int64(w / time.Second)
		st.DurationUntilReset = &durationpb.Duration{Seconds: s - (nowMs/1000)%s}
	}
	return st
}

// answerTime is the moment an answer's durations count from: the latest
// Redis time of its decisions, or this process's clock when none was decided.
func answerTime(outs []outcome) int64 {
	var nowMs int64
	for _, o := range outs {
		if o.decided {
			nowMs = max(nowMs, o.d.NowMs)
		}
	}
	if nowMs == 0 {
		nowMs = time.Now().UnixMilli()
	}
	return nowMs
}

// compatRate is the limit a compat status reports: the file's or the
// override's, or for a policy of ratescope's own its binding rule, unnamed.
func compatRate(o outcome) *rlsv3.RateLimitResponse_RateLimit {
	if o.c.file != nil && !o.overridden() {
		return o.c.file.rate
	}
	var r *rlsv3.RateLimitResponse_RateLimit
	if o.decided {
		b := o.d.Bound()
		r = currentLimit(o.d.Policy, len(o.d.Rules), b)
	} else {
		r = neverStatus(o.p.Policy).CurrentLimit
	}
	r.Name = ""
	return r
}
