package server

import (
	"context"
	"fmt"
	"net/http"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redisdata"
	"github.com/ratescope/ratescope/limiter/httplimit"
)

// defaultMaxLabs is how many labs Redis holds at once by default, across
// every instance. A lab at its largest — the five windows of a rule of 100
// and a list of 600 answers — takes about 320 KB, so 64 labs take at most
// about 20 MB; a lab as the page runs it by default, a few KB: a classroom
// of learners, each with a lab of their own, fits.
const defaultMaxLabs = 64

// labRegistryKey is the registry of live labs: a sorted set of lab names,
// each scored with the Redis time (ms) at which the last of its state
// expires. The client key "lab" is no lab's ("lab:<name>") and "@labs" no
// configured policy's name, so it meets no window.
var labRegistryKey = redisdata.LogKey("lab", "@labs")

// labAdmitScript admits a lab if it is registered, or if fewer than the cap
// are: one script, so instances that admit at once never hold more between
// them. A lab's place is kept as long as its state may live, and extended
// by each of its checks.
//
// KEYS[1] the registry; ARGV[1] the lab; ARGV[2] how long its state may live
// from now (ms); ARGV[3] the most labs.
// Returns {1, 0} when the lab may go on, {0, ms until the next place frees}.
var labAdmitScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local reg, lab = KEYS[1], ARGV[1]
local till = now + tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', reg, '-inf', now)
local at = redis.call('ZSCORE', reg, lab)
if not at then
  if redis.call('ZCARD', reg) >= tonumber(ARGV[3]) then
    local first = redis.call('ZRANGE', reg, 0, 0, 'WITHSCORES')
    return {0, tonumber(first[2]) - now}
  end
elseif tonumber(at) >= till then
  return {1, 0}
end
redis.call('ZADD', reg, till, lab)
if redis.call('PTTL', reg) < till - now then
  redis.call('PEXPIRE', reg, till - now)
end
return {1, 0}
`)

// labRegistry caps the labs whose state Redis holds, across every instance
// (a lab is open to anyone, and each new lab name is new state in Redis).
type labRegistry struct {
	rdb redis.Scripter
	max int // 0: no cap
}

// admit reports whether lab may be checked with a window of windowMs, and
// when not, how long until a place frees. A lab's state lives at most two
// windows (the sliding-window counter keeps the previous one).
func (r labRegistry) admit(ctx context.Context, lab string, windowMs int64) (bool, int64, error) {
	if r.max <= 0 {
		return true, 0, nil
	}
	res, err := labAdmitScript.Run(ctx, r.rdb, []string{labRegistryKey}, lab, 2*windowMs, r.max).Int64Slice()
	if err != nil || len(res) != 2 {
		return false, 0, fmt.Errorf("failed to admit a lab: %w", err)
	}
	return res[0] == 1, max(res[1], 0), nil
}

// labsFull is the answer to a new lab beyond the cap: 503, as any cap of an
// instance answers, with when the next place frees.
func labsFull(most int, retryAfterMs int64) *problem {
	return newProblem(http.StatusServiceUnavailable, fmt.Sprintf(
		"the lab holds as many labs as it may at once (%d, --max-labs); a place frees in %d ms, or use a lab already running", most, retryAfterMs)).
		withHeader("Retry-After", httplimit.RetryAfter(max(retryAfterMs, 1)))
}
